from layang.serving.app import create_app

app = create_app()
