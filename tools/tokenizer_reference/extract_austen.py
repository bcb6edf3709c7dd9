#!/usr/bin/env python3
"""Extracts Jane Austen's six novels from Debian's r-cran-janeaustenr, without R.

The package keeps its data as an R lazy-load database: Rdata.rdx (a gzip file, the
index: name -> offset and length) and Rdata.rdb (blocks of a 4-byte big-endian
length followed by a zlib stream), both in R's XDR serialization (version 2 or 3). Each novel
is a character vector with one element per line of text.

  extract_austen.py OUT_DIR [DATA_DIR]
writes OUT_DIR/<name>.txt (lines joined by '\n', one trailing '\n') for emma,
mansfieldpark, northangerabbey, persuasion, prideprejudice and sensesensibility.
Standard library only.
"""
import gzip
import os
import struct
import sys
import zlib

DATA_DIR = "/usr/lib/R/site-library/janeaustenr/data"
NOVELS = ["emma", "mansfieldpark", "northangerabbey", "persuasion", "prideprejudice", "sensesensibility"]


def unpack_block(raw):
    """A .rdb block: 4-byte big-endian uncompressed length, then a zlib stream."""
    (length,) = struct.unpack(">I", raw[:4])
    data = zlib.decompress(raw[4:])
    if len(data) != length:
        raise SystemExit("extract_austen: block length mismatch")
    return data


class Named(list):
    """A list or vector together with its `names` attribute (None when absent)."""
    names = None


class Reader:
    """A minimal reader of R's XDR serialization: enough for vectors, lists and pairlists."""

    def __init__(self, data):
        self.data, self.pos, self.refs = data, 0, []
        if data[:2] != b"X\n":
            raise SystemExit("extract_austen: not an XDR serialization")
        self.pos = 2
        version = self.int()
        self.int()  # writer's R version
        self.int()  # minimal reader version
        if version == 3:
            n = self.int()  # native encoding name
            self.pos += n

    def int(self):
        (v,) = struct.unpack(">i", self.data[self.pos:self.pos + 4])
        self.pos += 4
        return v

    def item(self):
        flags = self.int()
        kind = flags & 0xFF
        has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if kind in (254, 242):  # NULL, empty environment
            return None
        if kind == 255:  # reference to an earlier symbol
            index = flags >> 8
            return self.refs[(index if index else self.int()) - 1]
        if kind == 1:  # symbol
            sym = self.item()
            self.refs.append(sym)
            return sym
        if kind == 2:  # pairlist: (attr), (tag), car, cdr -> dict tag: value
            out = {}
            while kind == 2:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else None
                out[tag] = self.item()
                flags = self.int()
                kind = flags & 0xFF
                has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
            if kind != 254:
                raise SystemExit("extract_austen: unsupported pairlist tail %d" % kind)
            return out
        if kind == 9:  # CHARSXP: length -1 is NA
            n = self.int()
            if n == -1:
                return None
            s = self.data[self.pos:self.pos + n]
            self.pos += n
            return s.decode("latin-1" if flags & (1 << 14) else "utf-8")
        n = self.int()
        if kind in (10, 13):  # logical, integer
            v = Named(struct.unpack(">%di" % n, self.data[self.pos:self.pos + 4 * n]))
            self.pos += 4 * n
        elif kind == 14:  # double
            v = Named(struct.unpack(">%dd" % n, self.data[self.pos:self.pos + 8 * n]))
            self.pos += 8 * n
        elif kind in (16, 19, 20):  # character vector, list, expression
            v = Named(self.item() for _ in range(n))
        else:
            raise SystemExit("extract_austen: unsupported R type %d" % kind)
        if has_attr:
            v.names = self.item().get("names")
        return v


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    out_dir = sys.argv[1]
    data_dir = sys.argv[2] if len(sys.argv) > 2 else DATA_DIR
    with open(os.path.join(data_dir, "Rdata.rdx"), "rb") as f:  # gzip, as saveRDS writes it
        index = Reader(gzip.decompress(f.read())).item()
    variables = index[index.names.index("variables")]
    with open(os.path.join(data_dir, "Rdata.rdb"), "rb") as f:
        rdb = f.read()
    os.makedirs(out_dir, exist_ok=True)
    found = 0
    for name, (offset, length) in zip(variables.names, variables):
        if name not in NOVELS:
            continue
        lines = Reader(unpack_block(rdb[int(offset):int(offset) + int(length)])).item()
        text = "\n".join("" if line is None else line for line in lines) + "\n"
        with open(os.path.join(out_dir, name + ".txt"), "w", encoding="utf-8") as f:
            f.write(text)
        found += 1
    if found != len(NOVELS):
        raise SystemExit("extract_austen: found %d of %d novels" % (found, len(NOVELS)))


if __name__ == "__main__":
    main()
