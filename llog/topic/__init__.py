"""Topics: their administration — create, list, describe, configure, add partitions,
fence, delete (:mod:`.admin`); deleting a topic's etcd state (:mod:`.deletion`); the
topic guard every write under a topic's keys compares (:mod:`.guard`); offsets by
timestamp (:mod:`.time_lookup`)."""
