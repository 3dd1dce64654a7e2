package protocol

// Decoding a joined message without copying its large strings. protobuf
// copies every string it decodes; for a message of many megabytes (a
// large task or output, whose chunks joinChunks has just put together in
// a buffer of its own) that is one more copy of the whole payload, into
// memory the process has not touched yet. aliasUnmarshal decodes such a
// message with its large strings pointing into the buffer instead. Only
// string fields: Go strings cannot be changed, so nothing that holds the
// decoded message can write to the buffer through them. The buffer must not
// change afterwards either; RecvRaw's callers keep it as the message's raw
// bytes (to store and hash), which nothing writes to.

import (
	"slices"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// aliasMin is the size from which aliasUnmarshal leaves a string in the
// buffer; tests lower it.
var aliasMin = 64 << 10

// aliasDepth bounds the nesting aliasUnmarshal follows; kith's messages
// nest five deep at most.
const aliasDepth = 16

// aliasStep is one field on the way from the decoded message to a string
// left in the buffer: a singular message field (index -1) or one element
// of a repeated one.
type aliasStep struct {
	fd  protoreflect.FieldDescriptor
	idx int
}

// aliasHole is a string left in the buffer: the field, the way to the
// message that holds it, and where its bytes are.
type aliasHole struct {
	path   []aliasStep
	fd     protoreflect.FieldDescriptor
	off, n int
}

// aliasUnmarshal is unmarshal, for a buffer b that nothing changes
// afterwards: its singular string fields of aliasMin bytes or more are
// decoded as strings over b's memory, checked for UTF-8 as protobuf checks
// them. What it decodes and refuses is what unmarshal decodes and refuses
// (FuzzAliasUnmarshal): b is first rewritten with those strings empty, and
// whenever that rewriting meets anything whose decoding would depend on
// more than the bytes in front of it (a oneof or a singular message set
// twice, nesting past aliasDepth, anything malformed), b is decoded by
// unmarshal as it is.
func aliasUnmarshal(name string, b []byte, m proto.Message) error {
	if len(b) < max(aliasMin, 1) {
		return unmarshal(name, b, m) // no string to leave in b: nothing to walk
	}
	var holes []aliasHole
	reduced, ok := elide(b, 0, m.ProtoReflect().Descriptor(), nil, &holes, 0)
	if !ok || len(holes) == 0 {
		return unmarshal(name, b, m)
	}
	if err := unmarshal(name, reduced, m); err != nil {
		return err
	}
	for _, h := range holes {
		v := b[h.off : h.off+h.n]
		if !utf8.Valid(v) {
			proto.Reset(m)
			return unmarshal(name, b, m) // refused there, as it would be
		}
		at := m.ProtoReflect()
		for _, st := range h.path {
			if st.idx < 0 {
				at = at.Mutable(st.fd).Message()
				continue
			}
			at = at.Mutable(st.fd).List().Get(st.idx).Message()
		}
		at.Set(h.fd, protoreflect.ValueOfString(unsafe.String(&v[0], len(v))))
	}
	return nil
}

// fieldCount is how many elements of a repeated message field a message
// has given so far.
type fieldCount struct {
	num protowire.Number
	n   int
}

// elide returns b, a message of type md that starts at offset base of the
// whole buffer, with its large singular strings empty, and adds where
// each was to holes; ok is false when b must be decoded as it is (see
// aliasUnmarshal).
func elide(b []byte, base int, md protoreflect.MessageDescriptor, path []aliasStep, holes *[]aliasHole, depth int) (_ []byte, ok bool) {
	if depth > aliasDepth {
		return nil, false
	}
	fields := md.Fields()
	out := make([]byte, 0, min(len(b), 4096))
	// What this message has given so far, in arrays that stay on the stack
	// for the few fields a message has: its singular fields (a second one
	// is merged or replaces the first, which the holes' paths cannot
	// follow), its oneofs (a second member replaces the first) and its
	// repeated messages' counts (a hole's index among them).
	var (
		onceA                  [8]protowire.Number
		oneofsA                [4]protoreflect.FullName
		repeatedA              [4]fieldCount
		once, oneofs, repeated = onceA[:0], oneofsA[:0], repeatedA[:0]
	)
	for at := 0; at < len(b); {
		num, typ, n := protowire.ConsumeTag(b[at:])
		if n < 0 {
			return nil, false
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[at+n:])
		if vn < 0 {
			return nil, false
		}
		whole := b[at : at+n+vn]
		at += len(whole)
		fd := fields.ByNumber(num)
		if fd == nil || typ != protowire.BytesType || fd.IsMap() ||
			(fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.StringKind) ||
			(fd.Kind() == protoreflect.StringKind && fd.IsList()) {
			out = append(out, whole...)
			continue
		}
		v, ln := protowire.ConsumeBytes(whole[n:])
		if ln < 0 {
			return nil, false
		}
		vAt := at - len(v) // v's offset in b: it ends the field
		idx := -1
		if !fd.IsList() {
			if slices.Contains(once, num) {
				return nil, false
			}
			once = append(once, num)
			if od := fd.ContainingOneof(); od != nil {
				if slices.Contains(oneofs, od.FullName()) {
					return nil, false
				}
				oneofs = append(oneofs, od.FullName())
			}
		} else {
			i := slices.IndexFunc(repeated, func(r fieldCount) bool { return r.num == num })
			if i < 0 {
				i = len(repeated)
				repeated = append(repeated, fieldCount{num: num})
			}
			idx = repeated[i].n
			repeated[i].n++
		}
		switch {
		case len(v) < max(aliasMin, 1):
			// Too short to hold a string left in the buffer, at any depth.
			out = append(out, whole...)
		case fd.Kind() == protoreflect.MessageKind:
			sub, ok := elide(v, base+vAt, fd.Message(), append(path[:len(path):len(path)], aliasStep{fd, idx}), holes, depth+1)
			if !ok {
				return nil, false
			}
			out = protowire.AppendTag(out, num, protowire.BytesType)
			out = protowire.AppendBytes(out, sub)
		default:
			*holes = append(*holes, aliasHole{path: path, fd: fd, off: base + vAt, n: len(v)})
			out = protowire.AppendTag(out, num, protowire.BytesType)
			out = protowire.AppendVarint(out, 0)
		}
	}
	return out, true
}
