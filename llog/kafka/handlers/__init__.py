"""One module per group of Kafka APIs; each handler takes the :class:`Context` and
the decoded request and returns the response."""
