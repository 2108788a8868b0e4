"""Local load testing: start a cluster on loopback (:mod:`.orchestrator`), drive load
through the brokers (:mod:`.generator`, routed by :mod:`.routing`), watch it
(:mod:`.collector`), break it (:mod:`.chaos`) and prove nothing was lost or
duplicated (:mod:`.reconcile`). Scenarios are TOML files (:mod:`.scenario`)."""
