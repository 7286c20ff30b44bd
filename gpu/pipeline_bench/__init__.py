"""The whole-pipeline benchmark of a GPU node (``python -m gpu.pipeline_bench``): N single-face
720p30 sessions from decoded frames to encoder-ready YUV, every stage on the device. Needs
numpy, onnx, cv2 and, on a GPU, torch + CuPy: no media stack, no mediapipe."""
