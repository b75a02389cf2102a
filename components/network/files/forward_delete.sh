require TAG
delete_tagged_rules "$TAG"
