package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// badgerLogger routes badger's printf-style logging into slog with a constant
// message. Badger's Info lines (table counts, replay progress on every open)
// are noise for a kith operator, so they go to Debug with badger's own debug
// output; warnings and errors keep their level.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, args ...any)   { b.log(slog.LevelError, f, args) }
func (b badgerLogger) Warningf(f string, args ...any) { b.log(slog.LevelWarn, f, args) }
func (b badgerLogger) Infof(f string, args ...any)    { b.log(slog.LevelDebug, f, args) }
func (b badgerLogger) Debugf(f string, args ...any)   { b.log(slog.LevelDebug, f, args) }

func (b badgerLogger) log(level slog.Level, f string, args []any) {
	ctx := context.Background()
	if !b.l.Enabled(ctx, level) {
		return // skip the Sprintf: badger logs a lot at debug level
	}
	b.l.Log(ctx, level, "badger", "detail", strings.TrimSpace(fmt.Sprintf(f, args...)))
}
