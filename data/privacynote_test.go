package data

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// Issue 36 item 10: every exported helper that computes statistics of a
// data set warns, in its doc, that they are not private and says what to
// use instead. Before the fix none did (seen failing).
func TestStatisticsHelpersWarn(t *testing.T) {
	fset := token.NewFileSet()
	docs := map[string]string{}
	for _, f := range []string{"dataset.go", "detect.go"} {
		file, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Doc != nil {
				docs[fn.Name.Name] = strings.Join(strings.Fields(fn.Doc.Text()), " ")
			}
		}
	}
	for name, instead := range map[string]string{
		"ChannelStats":       "published constants",
		"NormalizeTrainTest": "published constants",
		"ClassCounts":        "Do not publish",
		"DetectIDXContent":   "Use Name",
	} {
		doc := docs[name]
		if !strings.Contains(doc, "Not private") || !strings.Contains(doc, "not covered by any privacy guarantee") || !strings.Contains(doc, instead) {
			t.Errorf("%s's doc does not warn that its statistics are not private and say what to do (%q):\n%s", name, instead, doc)
		}
	}
}
