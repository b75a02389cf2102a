# Host port -> container port (rules in lib.sh forward_rules). All rules carry TAG; a changed
# target replaces them.
require TAG HOST_PORT TARGET_ADDRESS TARGET_PORT
forward_up "$TAG" "$HOST_PORT" "$TARGET_ADDRESS" "$TARGET_PORT"
