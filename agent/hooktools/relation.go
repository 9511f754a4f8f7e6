package hooktools

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
)

// relationFlag is the -r/--relation option. It accepts "N" or
// "endpoint:N"; only the text after the last ":" counts, and the relation
// must exist. Its default is the relation of the running relation hook, or
// -1 outside relation hooks.
type relationFlag struct {
	ctx  Context
	id   int
	text string // as given, or the hook relation's key; shown in help
}

// newRelationFlag returns the option with the hook's relation as default.
func newRelationFlag(ctx Context) *relationFlag {
	f := &relationFlag{ctx: ctx, id: -1}
	if id, ok := ctx.HookRelation(); ok {
		f.id = id
		if r, err := ctx.Relation(id); err == nil {
			f.text = r.Key()
		}
	}
	return f
}

// add declares -r and --relation.
func (f *relationFlag) add(fs *flagSet) {
	fs.add(f, "Select the relation by id (endpoint:id or id)", "r", "relation")
}

func (f *relationFlag) String() string { return f.text }

func (f *relationFlag) Set(s string) error {
	idText := s
	if i := strings.LastIndex(idText, ":"); i >= 0 {
		idText = idText[i+1:]
	}
	id, err := strconv.Atoi(idText)
	if err != nil {
		return errors.New("invalid relation id")
	}
	if _, err := f.ctx.Relation(id); err != nil {
		if errors.Is(err, ErrRelationNotFound) {
			return ErrRelationNotFound
		}
		return err
	}
	f.id, f.text = id, s
	return nil
}

// require is the check every relation tool makes in init: a relation
// must be given or implied by the hook.
func (f *relationFlag) require() error {
	if f.id == -1 {
		return errors.New("no relation id specified")
	}
	return nil
}

// Application and unit names as Juju validates them (juju/names).
var (
	validApplication = regexp.MustCompile(`^[a-z][a-z0-9]*(?:-[a-z0-9]*[a-z][a-z0-9]*)*$`)
	validUnit        = regexp.MustCompile(`^([a-z][a-z0-9]*(?:-[a-z0-9]*[a-z][a-z0-9]*)*)/(?:0|[1-9][0-9]*)$`)
)

// isValidApplication reports whether name is a valid application name.
func isValidApplication(name string) bool { return validApplication.MatchString(name) }

// isValidUnit reports whether name is a valid unit name ("app/N").
func isValidUnit(name string) bool { return validUnit.MatchString(name) }

// unitApplication returns the application of a valid unit name.
func unitApplication(unit string) string {
	app, _, _ := strings.Cut(unit, "/")
	return app
}
