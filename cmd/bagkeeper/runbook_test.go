package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// remedy finds an error message that tells the operator what to do: a
// clause that starts with one of these verbs.
var remedy = regexp.MustCompile(`(?i)([;:.,(]|—|\bthen|\bor) *(restart|run|use|move|bring|retry|stop|check|remove|wait|give|pass|set|add|delete|fix|free|start|scale|try|see|install|mount|upgrade|stage|ask|raise|lower|accept)\b`)

// notForOperators are messages no command line can cause (a caller's
// mistake in code), by their constant part.
var notForOperators = map[string]string{
	"transport config: App is empty; set the application name that all nodes of the group share": "the sidecar always sets it",
}

// formatVerb splits a format string into its constant parts.
var formatVerb = regexp.MustCompile(`%[-+# 0-9.*]*[a-zA-Z]|\n`)

// TestRunbookNamesEveryRemedy: every error message the commands can print
// that names a remedy appears in docs/operations.md, the runbook, so an
// operator who reads one finds what it means. Messages are found in the
// source (fmt.Errorf, errors.New, status.Errorf and the like with a
// constant format); the longest constant part of each (what the values
// do not change) must be in the runbook. The hook tools' messages are
// Juju's and documented in docs/charms.md.
func TestRunbookNamesEveryRemedy(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	runbook := normalise(string(doc))
	type message struct{ pos, text, key string }
	var messages []message
	fset := token.NewFileSet()
	for _, root := range []string{"../../cmd/bagkeeper", "../../sidecar", "../../raftstore", "../../agent"} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "hooktools" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || strings.HasSuffix(p, ".pb.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				arg := formatArg(call)
				if arg < 0 || arg >= len(call.Args) {
					return true
				}
				text, ok := constString(call.Args[arg])
				if !ok || !remedy.MatchString(text) {
					return true
				}
				messages = append(messages, message{pos: fset.Position(call.Pos()).String(), text: text, key: constantPart(text)})
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(messages) < 20 {
		t.Fatalf("found only %d messages naming a remedy: is the scan broken?", len(messages))
	}
	for _, m := range messages {
		if _, ok := notForOperators[m.key]; ok {
			continue
		}
		if !strings.Contains(runbook, normalise(m.key)) {
			t.Errorf("%s: %q names a remedy but docs/operations.md does not have %q", m.pos, m.text, m.key)
		}
	}
}

// formatArg is the index of the message argument of an error-making call,
// or -1 for other calls.
func formatArg(call *ast.CallExpr) int {
	switch fn := call.Fun.(type) {
	case *ast.SelectorExpr:
		x, ok := fn.X.(*ast.Ident)
		if !ok {
			return -1
		}
		switch x.Name + "." + fn.Sel.Name {
		case "fmt.Errorf", "errors.New", "fmt.Sprintf":
			return 0
		case "status.Errorf", "status.Error":
			return 1
		}
	case *ast.Ident:
		if fn.Name == "usageErrorf" {
			return 0
		}
	}
	return -1
}

// constString evaluates a string literal or a sum of them.
func constString(e ast.Expr) (string, bool) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(v.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if v.Op != token.ADD {
			return "", false
		}
		a, ok1 := constString(v.X)
		b, ok2 := constString(v.Y)
		return a + b, ok1 && ok2
	case *ast.ParenExpr:
		return constString(v.X)
	}
	return "", false
}

// constantPart is the longest part of a format that no value changes,
// without the punctuation around it.
func constantPart(format string) string {
	best := ""
	for _, p := range formatVerb.Split(format, -1) {
		p = strings.Trim(p, " ;:,.()'\"`")
		if len(p) > len(best) {
			best = p
		}
	}
	return best
}

// normalise drops what Markdown adds (backquotes, line breaks).
func normalise(s string) string {
	s = strings.ReplaceAll(s, "`", "")
	return strings.Join(strings.Fields(s), " ")
}
