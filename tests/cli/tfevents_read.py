#!/usr/bin/env python3
"""An independent reader of TensorBoard event files (the standard library only).

    tfevents_read.py RUN_DIR [--require TAG ...]   check RUN_DIR's event files
                                                   against RUN_DIR/run.h5
    tfevents_read.py --dump RUN_DIR                print step, tag, value lines

Written from the format (TensorFlow's record_writer and event.proto), not from
core/io/tfevents.c: every record is framed as uint64 length, masked CRC-32C of
the length, payload, masked CRC-32C of the payload; every payload an Event
(wall_time 1 double, step 2 int64, file_version 3 string, summary 5 with
values of tag 1 string and simple_value 2 float).

The check: every CRC is right; each file starts with the file_version event
"brain.Event:2"; no (tag, step) is written twice over the files (a resume
starts a new file without repeating steps); every tag names a dataset of the
run file (tag "metrics/loss" = /metrics/loss, its steps in /metrics/step), and
its values are exactly the run file's finite values rounded to float32, at
exactly the steps where the run file's value is finite.  run.h5 is read with
h5dump (hdf5-tools): Python's standard library has no HDF5 reader.  Exit 1
with a message on the first thing wrong."""
import glob
import math
import os
import struct
import subprocess
import sys

CRC32C_POLY = 0x82F63B78  # Castagnoli, bit-reflected
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ CRC32C_POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def varint(buf, at):
    v, shift = 0, 0
    while True:
        if at >= len(buf):
            raise ValueError("varint runs past the end")
        b = buf[at]
        at += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, at


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    at, out = 0, []
    while at < len(buf):
        key, at = varint(buf, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, at = varint(buf, at)
        elif wire == 1:
            v = buf[at:at + 8]
            at += 8
        elif wire == 5:
            v = buf[at:at + 4]
            at += 4
        elif wire == 2:
            n, at = varint(buf, at)
            v = buf[at:at + n]
            at += n
        else:
            raise ValueError("wire type %d" % wire)
        if at > len(buf):
            raise ValueError("field %d runs past the end" % field)
        out.append((field, wire, v))
    return out


def read_records(path):
    data = open(path, "rb").read()
    at, n = 0, 0
    while at < len(data):
        if len(data) - at < 12:
            fail("%s: %d bytes at offset %d, not a record's header" % (path, len(data) - at, at))
        length = struct.unpack_from("<Q", data, at)[0]
        if struct.unpack_from("<I", data, at + 8)[0] != masked(crc32c(data[at:at + 8])):
            fail("%s: record %d (offset %d): the length's CRC is wrong" % (path, n, at))
        payload = data[at + 12:at + 12 + length]
        if len(payload) != length or len(data) < at + 16 + length:
            fail("%s: record %d (offset %d) is cut short" % (path, n, at))
        if struct.unpack_from("<I", data, at + 12 + length)[0] != masked(crc32c(payload)):
            fail("%s: record %d (offset %d): the payload's CRC is wrong" % (path, n, at))
        yield n, payload
        at += 16 + length
        n += 1


def decode_event(path, n, payload):
    ev = {"wall_time": 0.0, "step": 0, "file_version": None, "values": None}
    try:
        for field, wire, v in fields(payload):
            if field == 1 and wire == 1:
                ev["wall_time"] = struct.unpack("<d", v)[0]
            elif field == 2 and wire == 0:
                ev["step"] = v
            elif field == 3 and wire == 2:
                ev["file_version"] = v.decode()
            elif field == 5 and wire == 2:
                ev["values"] = []
                for f, w, val in fields(v):
                    if f != 1 or w != 2:
                        raise ValueError("Summary field %d" % f)
                    tag, simple = None, None
                    for g, x, y in fields(val):
                        if g == 1 and x == 2:
                            tag = y.decode()
                        elif g == 2 and x == 5:
                            simple = struct.unpack("<f", y)[0]
                    if tag is None or simple is None:
                        raise ValueError("a value without a tag or a simple_value")
                    ev["values"].append((tag, simple))
    except ValueError as e:
        fail("%s: record %d does not parse as an Event: %s" % (path, n, e))
    return ev


def event_files(run_dir):
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    if not files:
        fail("%s: no events.out.tfevents.* file" % run_dir)
    return files


def read_events(run_dir):
    """{tag: {step: value}}, and the count of files and records."""
    seen, records = {}, 0
    for path in event_files(run_dir):
        last_wall = -math.inf
        for n, payload in read_records(path):
            ev = decode_event(path, n, payload)
            records += 1
            if n == 0:
                if ev["file_version"] != "brain.Event:2" or ev["values"] is not None:
                    fail("%s: the first record is not the file_version event brain.Event:2"
                         % path)
                continue
            if ev["values"] is None or ev["file_version"] is not None:
                fail("%s: record %d is not a Summary of scalars" % (path, n))
            if ev["wall_time"] < last_wall:
                fail("%s: record %d goes back in wall time" % (path, n))
            last_wall = ev["wall_time"]
            for tag, v in ev["values"]:
                steps = seen.setdefault(tag, {})
                if ev["step"] in steps:
                    fail("%s: %s at step %d written twice" % (path, tag, ev["step"]))
                steps[ev["step"]] = v
    return seen, records


def h5_column(h5, name):
    out = subprocess.run(["h5dump", "-d", "/" + name, "-y", "-w", "0", "-m", "%.17g",
                          "-o", "/dev/stdout", "-O", "/dev/null", h5],
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail("%s: no dataset /%s (h5dump: %s)" % (h5, name, out.stderr.strip()))
    return [float(x) for x in out.stdout.replace(",", " ").split()]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check(run_dir, required):
    h5 = os.path.join(run_dir, "run.h5")
    seen, records = read_events(run_dir)
    for tag in required:
        if tag not in seen:
            fail("no tag %s in the events (tags: %s)" % (tag, ", ".join(sorted(seen))))
    values = 0
    for tag, got in sorted(seen.items()):
        group = tag.rsplit("/", 1)[0]
        steps = [int(s) for s in h5_column(h5, group + "/step")]
        want = {s: v for s, v in zip(steps, h5_column(h5, tag)) if math.isfinite(v)}
        if sorted(got) != sorted(want):
            fail("%s: steps %s in the events, %s in %s" % (tag, sorted(got), sorted(want), h5))
        for s, v in got.items():
            if struct.pack("<f", v) != struct.pack("<f", f32(want[s])):
                fail("%s at step %d: %r in the events, %r (%r as float32) in %s"
                     % (tag, s, v, want[s], f32(want[s]), h5))
            values += 1
    print("ok: %d event files, %d records with valid CRCs, %d tags, %d values equal to %s's"
          % (len(event_files(run_dir)), records, len(seen), values, h5))


def main(argv):
    if len(argv) >= 2 and argv[0] == "--dump":
        seen, _ = read_events(argv[1])
        for tag in sorted(seen):
            for s in sorted(seen[tag]):
                print("%d %s %.9g" % (s, tag, seen[tag][s]))
        return 0
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    required = []
    if len(argv) > 1:
        if argv[1] != "--require":
            print(__doc__)
            return 2
        required = argv[2:]
    check(argv[0], required)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
