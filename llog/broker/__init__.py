"""The HTTP broker: ``create_app`` builds the ASGI app, ``serve`` runs it."""

from llog.broker.app import create_app
from llog.broker.launch import serve

__all__ = ["create_app", "serve"]
