"""One module per group of Kafka APIs; each handler takes the :class:`Context` and
the decoded request and returns the response (a coroutine on the event loop, or a
plain function the listener runs on a worker thread: ``Api.runs`` in
:mod:`llog.kafka.apis`)."""
