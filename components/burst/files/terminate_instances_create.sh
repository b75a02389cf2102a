# Nothing to make: the burst instances are Slurm's. This resource exists for its delete
# (terminate_instances_delete.sh), which a destroy runs before the templates and network go.
require CLUSTER
log "burst instances of $CLUSTER: ended on destroy"
