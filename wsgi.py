from layang.serving.wsgi import app

__all__ = ["app"]
