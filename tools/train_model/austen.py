"""Reads Jane Austen's six novels from Debian's r-cran-janeaustenr, without R.

The package keeps them in R's lazy-load database Rdata.rdb: slices laid one
after another, each a 4-byte big-endian size followed by a zlib stream holding
one object in R's XDR serialization; each novel is a character vector (one
element per line). The novels are told apart by their title lines, so the index
(Rdata.rdx) is not needed. Only what these files use is read: STRSXP of CHARSXP.
"""
import struct
import zlib

DATA = "/usr/lib/R/site-library/janeaustenr/data/Rdata"
NOVELS = ["prideprejudice", "sensesensibility", "mansfieldpark", "emma", "northangerabbey", "persuasion"]


class XdrReader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def int(self):
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def bytes(self, n):
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def header(self):
        assert self.bytes(2) == b"X\n", "not R XDR serialization"
        version = self.int()
        self.int(), self.int()  # writer R version, minimal reader version
        if version == 3:
            self.bytes(self.int())  # native encoding name


def read_strings(blob):
    """The elements of a serialized character vector (STRSXP)."""
    r = XdrReader(blob)
    r.header()
    flags = r.int()
    assert flags & 0xFF == 16, f"expected a character vector, got SEXP type {flags & 0xFF}"
    strings = []
    for _ in range(r.int()):
        assert r.int() & 0xFF == 9, "expected CHARSXP"
        n = r.int()
        strings.append("" if n < 0 else r.bytes(n).decode("utf-8", errors="replace"))
    return strings


def read_slices():
    """The decompressed slices of Rdata.rdb, in file order (each one serialized R object)."""
    rdb = open(DATA + ".rdb", "rb").read()
    slices, pos = [], 0
    while pos < len(rdb):
        (size,) = struct.unpack_from(">I", rdb, pos)
        inflater = zlib.decompressobj()
        blob = inflater.decompress(rdb[pos + 4:])
        assert len(blob) == size, "slice size mismatch"
        slices.append(blob)
        pos = len(rdb) - len(inflater.unused_data)
    return slices


def novels():
    """{name: text} for the six novels, lines joined with newlines."""
    out = {}
    for blob in read_slices():
        try:
            lines = read_strings(blob)
        except AssertionError:
            continue
        text = "\n".join(lines)
        for name, marker in [("prideprejudice", "PRIDE AND PREJUDICE"), ("sensesensibility", "SENSE AND SENSIBILITY"),
                             ("mansfieldpark", "MANSFIELD PARK"), ("emma", "EMMA"),
                             ("northangerabbey", "NORTHANGER ABBEY"), ("persuasion", "Persuasion")]:
            if marker in text[:2000] and name not in out:
                out[name] = text
                break
    return out


if __name__ == "__main__":
    for name, text in novels().items():
        print(name, len(text), repr(text[:80]))
