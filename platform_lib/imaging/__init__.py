"""Camera image decoding shared by the loader and the model transforms (a leaf: no library imports).

Chain: JPEG bytes -> `decode.py` -> (H, W, 3) uint8 at the size the model needs (DCT-domain
downscaling, crop, resize) with the intrinsics that follow; nvJPEG backend there too.
"""
