"""`facestream serve`: the WebRTC server, its face library, its peers and its page."""
