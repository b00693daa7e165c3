"""dlib's models, the embedded default: the HOG detector, the 68-point landmarks and the
128-d embedding (run by our own numpy ports where dlib's would be slow), and the face
filter that gives a second opinion on detections."""
