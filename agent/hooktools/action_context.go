package hooktools

import "errors"

// ActionContext is implemented by a Context that can run an action: the
// action tools (action-get, action-set, action-log, action-fail) use it.
// Outside an action — a Context without it, or one whose methods return
// ErrNotAction — they fail as Juju's do.
type ActionContext interface {
	// ActionParams returns the parameters of the running action (never
	// nil in an action): JSON values, numbers as int64 or float64.
	ActionParams() (map[string]any, error)
	// UpdateActionResults sets the result at the key path keys (action-set
	// a.b=v sets ["a", "b"]) to value.
	UpdateActionResults(keys []string, value string) error
	// LogActionMessage records a progress message (action-log).
	LogActionMessage(message string) error
	// SetActionMessage and SetActionFailed make the action end failed
	// with a message (action-fail).
	SetActionMessage(message string) error
	SetActionFailed() error
}

// ErrNotAction is what the action tools report outside an action.
var ErrNotAction = errors.New("not running an action")

// actionContext returns ctx's action side, or ErrNotAction.
func actionContext(ctx Context) (ActionContext, error) {
	if ac, ok := ctx.(ActionContext); ok {
		return ac, nil
	}
	return nil, ErrNotAction
}

// SetActionResult sets the value at the key path keys in results,
// making maps on the way: a value that stands where a map is needed is
// replaced by one, as in Juju.
func SetActionResult(results map[string]any, keys []string, value string) {
	m := results
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = value
}
