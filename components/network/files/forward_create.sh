# Host port -> container port (rules in lib/forwards.sh forward_rules), on top of their chains. All
# rules carry TAG; a changed target or source list replaces them. Then the forward is checked
# end to end: a rule that shadows it fails the apply, naming its chain.
require TAG HOST_PORT TARGET_ADDRESS TARGET_PORT SOURCES
forward_up "$TAG" "$HOST_PORT" "$TARGET_ADDRESS" "$TARGET_PORT" "$SOURCES"
forward_check "$TAG" "$HOST_PORT" "$TARGET_ADDRESS" "$TARGET_PORT" "$SOURCES"
