/* TensorBoard event files (docs/tensorboard.md): what TensorBoard and W&B's
 * tensorboard sync read, written by hand.
 *
 * A file is a sequence of records, each
 *     uint64 length, uint32 masked CRC-32C of those 8 bytes,
 *     length bytes of payload, uint32 masked CRC-32C of the payload
 * (little-endian; masked: ((crc >> 15) | (crc << 17)) + 0xa282ead8), each
 * payload an Event protobuf: wall_time (field 1, double), step (2, int64),
 * then file_version "brain.Event:2" (3, the first record) or a Summary (5)
 * of values, each a tag (1, string) and a simple_value (2, float).
 *
 * One record per step, written with one write() as the step ends, so a
 * reader following the file (tensorboard --logdir) sees a run live and a
 * killed run leaves whole records only. */
#ifndef MODE_CORE_IO_TFEVENTS_H
#define MODE_CORE_IO_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#define TFEVENTS_PREFIX "events.out.tfevents."
#define TFEVENTS_FILE_VERSION "brain.Event:2"

typedef struct tfevents tfevents;

/* CRC-32C (Castagnoli) of n bytes, and TensorFlow's masked form of a CRC. */
uint32_t tfevents_crc32c(const void *p, size_t n);
uint32_t tfevents_mask(uint32_t crc);

/* A new event file in dir, events.out.tfevents.<seconds>.<host> (".<k>"
 * added when a file of that name exists: a resume within the second), its
 * first record the file_version event.  err names the file on failure. */
int tfevents_open(tfevents **out, const char *dir, char *err, int err_len);
void tfevents_close(tfevents **w);
const char *tfevents_path(const tfevents *w);

/* One scalar of the pending event (NaN and infinities are left out:
 * TensorBoard would draw nothing).  -ENOMEM when it cannot be held. */
int tfevents_add(tfevents *w, const char *tag, double value);
/* The pending scalars as one event of step, stamped with the wall time now,
 * appended to the file (nothing when none are pending).  A failed write
 * is an error naming the file. */
int tfevents_write(tfevents *w, long step, char *err, int err_len);

/* Resuming at step: every event file in dir keeps its records up to the
 * first of a later step (written past the checkpoint before a crash or a
 * stop), or to a record that is not whole; the rest is cut off, so that no
 * step is shown twice. */
int tfevents_rewind(const char *dir, long step, char *err, int err_len);
/* Removes the event files in dir (a new run in the folder). */
int tfevents_remove(const char *dir);

#endif
