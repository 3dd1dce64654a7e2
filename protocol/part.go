package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/kithmesh/kith/protocol/pb"
)

// Task is the work an offer carries, shaped like an A2A message.
type Task struct {
	Role  string // A2A role, e.g. "user"
	Parts []Part
}

// PartKind says which field of a Part is set.
type PartKind uint8

const (
	PartUnknown PartKind = iota // never valid on the wire
	PartText
	PartData
	PartFile
)

var partKindNames = [...]string{"unknown", "text", "data", "file"}

func (k PartKind) String() string {
	if int(k) < len(partKindNames) {
		return partKindNames[k]
	}
	return fmt.Sprintf("part_kind(%d)", uint8(k))
}

// Part is one piece of A2A content. Exactly the field that Kind names is
// set; the encoder refuses a Part with stray fields so that decode(encode(p))
// is always p.
type Part struct {
	Kind PartKind
	Text string // PartText
	Data []byte // PartData: a JSON object, as UTF-8 text
	File File   // PartFile
}

// File is a file part: its bytes inline, or a URI to fetch them from.
type File struct {
	Name      string
	MediaType string
	Bytes     []byte
	URI       string
}

// TextPart returns a text part.
func TextPart(s string) Part { return Part{Kind: PartText, Text: s} }

// DataPart returns a data part; data must be a JSON object.
func DataPart(data []byte) Part { return Part{Kind: PartData, Data: data} }

// FilePart returns a file part.
func FilePart(f File) Part { return Part{Kind: PartFile, File: f} }

func (t *Task) check() error {
	if err := checkLen("role", t.Role, MaxRoleLen); err != nil {
		return err
	}
	return checkParts("parts", t.Parts)
}

func checkParts(name string, ps []Part) error {
	if err := checkCount(name, len(ps), MaxParts); err != nil {
		return err
	}
	if err := checkPayload(name, ps); err != nil {
		return err
	}
	for i := range ps {
		if err := at(name, i, ps[i].check()); err != nil {
			return err
		}
	}
	return nil
}

func (p *Part) check() error {
	stray := func() error { return invalid(p.Kind.String(), "a %s part with other fields set", p.Kind) }
	switch p.Kind {
	case PartText:
		if p.Data != nil || !p.File.isZero() {
			return stray()
		}
	case PartData:
		if p.Text != "" || !p.File.isZero() {
			return stray()
		}
		if !isJSONObject(p.Data) {
			return invalid("data", "not a JSON object")
		}
	case PartFile:
		if p.Text != "" || p.Data != nil {
			return stray()
		}
		return within("file", p.File.check())
	default:
		return invalid("kind", "unknown part kind %d", uint8(p.Kind))
	}
	return nil
}

func (f *File) isZero() bool {
	return f.Name == "" && f.MediaType == "" && f.Bytes == nil && f.URI == ""
}

func (f *File) check() error {
	if err := checkLen("name", f.Name, MaxFileNameLen); err != nil {
		return err
	}
	if err := checkLen("media_type", f.MediaType, MaxMediaTypeLen); err != nil {
		return err
	}
	if err := checkLen("uri", f.URI, MaxURILen); err != nil {
		return err
	}
	if len(f.Bytes) > 0 && f.URI != "" {
		return invalid("uri", "a file part carries bytes or a URI, not both")
	}
	return nil
}

// isJSONObject reports whether b is one well-formed JSON value that is an
// object. encoding/json bounds nesting depth, so hostile input cannot
// exhaust the stack.
func isJSONObject(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && json.Valid(b)
}

func (t *Task) toWire() (*pb.Task, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	if t.Role == "" && len(t.Parts) == 0 {
		return nil, nil
	}
	return &pb.Task{Role: t.Role, Parts: partsToWire(t.Parts)}, nil
}

func taskFromWire(w *pb.Task) (Task, error) {
	parts, err := partsFromWire("parts", w.GetParts())
	if err != nil {
		return Task{}, err
	}
	t := Task{Role: w.GetRole(), Parts: parts}
	return t, t.check()
}

// partsToWire converts parts that check() has accepted.
func partsToWire(ps []Part) []*pb.Part {
	if len(ps) == 0 {
		return nil
	}
	out := make([]*pb.Part, len(ps))
	for i, p := range ps {
		switch p.Kind {
		case PartText:
			out[i] = &pb.Part{Kind: &pb.Part_Text{Text: &pb.TextPart{Text: p.Text}}}
		case PartData:
			out[i] = &pb.Part{Kind: &pb.Part_Data{Data: &pb.DataPart{Json: p.Data}}}
		case PartFile:
			out[i] = &pb.Part{Kind: &pb.Part_File{File: &pb.FilePart{
				Name: p.File.Name, MediaType: p.File.MediaType, Bytes: p.File.Bytes, Uri: p.File.URI,
			}}}
		}
	}
	return out
}

// partsFromWire converts and checks repeated parts; the count is checked
// before any conversion work.
func partsFromWire(name string, ws []*pb.Part) ([]Part, error) {
	if err := checkCount(name, len(ws), MaxParts); err != nil {
		return nil, err
	}
	if len(ws) == 0 {
		return nil, nil
	}
	out := make([]Part, len(ws))
	for i, w := range ws {
		switch k := w.GetKind().(type) {
		case *pb.Part_Text:
			out[i] = TextPart(k.Text.GetText())
		case *pb.Part_Data:
			out[i] = DataPart(bytesOrNil(k.Data.GetJson()))
		case *pb.Part_File:
			f := k.File
			out[i] = FilePart(File{
				Name: f.GetName(), MediaType: f.GetMediaType(), Bytes: bytesOrNil(f.GetBytes()), URI: f.GetUri(),
			})
		default:
			if len(w.ProtoReflect().GetUnknown()) > 0 {
				// Most likely a part kind from a newer minor version.
				return nil, within(indexed(name, i), fmt.Errorf("%w: part kind not known to this version", ErrUnknownEnum))
			}
			return nil, invalid(indexed(name, i), "part has no kind")
		}
		if err := at(name, i, out[i].check()); err != nil {
			return nil, err
		}
	}
	return out, nil
}
