"""Client quotas, Kafka's model (docs/security.md, "Quotas"): byte rates for produce and
fetch and a share of request-handling time, per user, per client id and per (user,
client id), with defaults; which quota applies to a client (:mod:`.entities`) and how
long it waits once over it (:mod:`.rate`)."""
