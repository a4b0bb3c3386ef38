"""One safetensors file read and written by hand (an 8-byte little-endian
header length, the JSON header padded with spaces to a multiple of 8, the
raw data), for the tests that check an export or edit a copy of it."""
import json
import struct


def read(path):
    """the header (name -> {dtype, shape, data_offsets}, and __metadata__)
    and the data after it"""
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(blob[8:8 + n]), bytearray(blob[8 + n:])


def write(path, h, data, raw_header=None):
    """h as the header (or raw_header's bytes as they are), then data"""
    hdr = raw_header if raw_header is not None else json.dumps(h).encode()
    hdr += b" " * (-len(hdr) % 8)
    open(path, "wb").write(struct.pack("<Q", len(hdr)) + hdr + bytes(data))
