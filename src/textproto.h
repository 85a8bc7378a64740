/* textproto.h — protobuf's text format (Caffe's .prototxt) read into the
 * structs protoc-c generates, driven only by their descriptors: one reader
 * for every message type, no code per field.
 *
 * Accepted: `name: value` and `name { ... }` / `name < ... >` (the colon
 * before a message is optional), repeated fields given several times or as
 * `name: [a, b]`, `#` comments, optional `,` / `;` after a field, strings in
 * single or double quotes with C escapes (adjacent strings are joined),
 * integers in decimal, hex or octal, floats with inf / nan, enum values by
 * name or number, booleans as true / false / t / f / 1 / 0. Refused, with
 * FILE:LINE: unknown fields, extensions (`[pkg.ext]`), Any expansions, a
 * value out of its type's range, an unknown enum name, a non-repeated field
 * given twice. A name not found is looked up again with a '_' appended:
 * schemas rename fields whose C member would clash with protobuf-c's own
 * (`base`). */
#ifndef RT_TEXTPROTO_H
#define RT_TEXTPROTO_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

/* Parse `len` bytes of `text` as one message of type `desc`; `file` names it
 * in messages. On success *out is a message to free with
 * protobuf_c_message_free_unpacked(*out, NULL). RT_ERR_FORMAT naming
 * FILE:LINE, or RT_ERR_NOMEM; *out is NULL on error. */
int rt_textproto_parse(const char *text, size_t len, const char *file,
                       const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out);

#endif
