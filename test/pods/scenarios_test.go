package pods

import (
	"testing"
)

func TestPods(t *testing.T) {
	a := startApp(t)
	a.check(t)
}
