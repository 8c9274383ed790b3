from layang.wsgi import app

__all__ = ["app"]
