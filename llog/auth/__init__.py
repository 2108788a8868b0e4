"""Principals: users and their SCRAM credentials (``scram.py``), stored in etcd
(``users.py``), against which the Kafka listener authenticates clients."""
