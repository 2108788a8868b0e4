"""This release of llog (CHANGELOG.md, RELEASES.md): the one place the version is written.
Processes report it (``llog --version``, ``GET /health``, the brokers' and sessions'
registrations, ``llog doctor``)."""

__version__ = "0.3.0.dev0"
