# This cluster no longer uses its people on the host; those the program made go with the
# last cluster using them, people who were there before stay.
require CLUSTER
host_people "$CLUSTER"
