"""gRPC API: the only code that touches gRPC. Thin: translate, validate, call the service."""
