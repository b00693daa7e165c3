"""The classical swapper, the no-download default: a piecewise-affine warp of the source
face onto the target's landmarks, colour transfer, seamless blending and occlusion finding."""
