"""The GPU web app in its own container."""
