package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Static is a fixed list of peer addresses, typically from a command-line
// flag. It is safe for concurrent use.
type Static struct {
	addrs []string
}

var _ Source = (*Static)(nil)

// NewStatic validates every address with [ParseAddr] and returns a source
// that always answers with them, sorted and de-duplicated.
//
// Entries that are empty or only white space are skipped, so that a list
// split from "a:1,b:2," works. If any other entry is invalid, NewStatic
// returns an error naming every invalid entry by its position (counting from
// 1); the error wraps [ErrInvalidAddress]. An empty list is valid and
// answers with nothing.
func NewStatic(addrs []string) (*Static, error) {
	var (
		valid []string
		errs  []error
	)
	for i, a := range addrs {
		if strings.TrimSpace(a) == "" {
			continue
		}
		addr, err := ParseAddr(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("static peer list entry %d: %w", i+1, err))
			continue
		}
		valid = append(valid, addr)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Static{addrs: sortedUnique(valid)}, nil
}

// Name returns "static [addr addr ...]".
func (s *Static) Name() string {
	return "static [" + strings.Join(s.addrs, " ") + "]"
}

// Lookup returns a copy of the list. It fails only if ctx has ended.
func (s *Static) Lookup(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return []string{}, fmt.Errorf("static peer list: %w", err)
	}
	return slices.Clone(s.addrs), nil
}
