# Stop and destroy the registry's container (also one left half-made); its data directory on
# the host is the data resource's. Succeeds when the container is already gone.
require CLUSTER CLUSTER_DIR CONTAINER
service_container_down
