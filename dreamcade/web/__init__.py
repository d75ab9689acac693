"""`dreamcade export RUN --web OUT`: a world as a static web page that plays offline in the
browser (graphs.py: the model's stages as ONNX; folder.py: the folder; page/: the page itself)."""
