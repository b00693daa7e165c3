"""Where frames come from: one module per kind (file, image, capture, rtsp, webrtc)."""
