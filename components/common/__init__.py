"""The shared building blocks of every area: field types, the transport (host commands), resource options, rendering."""
