"""Where finished frames go: one module per kind (file, image, vcam, preview, rtsp, webrtc)."""
