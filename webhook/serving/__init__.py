"""The webhook as a server: the Flask app (routes), the ASGI front and uvloop worker, gunicorn,
TLS with certificate reload, and certificate generation."""
