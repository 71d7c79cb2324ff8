package cli

import (
	"bufio"
	"context"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/gyrehq/gyre/internal/demo/scripted"
)

// gyre demo upstream prints its base URL as the first stdout line, serves
// the scripted demo model there until its context ends, and exits 0.
func TestDemoUpstream_PrintsItsURLAndServesUntilStopped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		code := Run(ctx, []string{"demo", "upstream", "--addr", "127.0.0.1:0"}, strings.NewReader(""), pw, &stderr, func(string) (string, bool) { return "", false })
		pw.Close()
		done <- code
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("first line: %v (stderr %s)", err, stderr.String())
	}
	base := strings.TrimSpace(line)
	if !regexp.MustCompile(`^http://127\.0\.0\.1:[1-9][0-9]*/v1$`).MatchString(base) {
		t.Fatalf("first line = %q, want http://127.0.0.1:PORT/v1", line)
	}
	c := openai.NewClient(option.WithBaseURL(base), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	page, err := c.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, scripted.Models) {
		t.Errorf("models = %v", ids)
	}
	cc, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: scripted.Candidate,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Where is my order A1?")}})
	if err != nil {
		t.Fatal(err)
	}
	if tc := cc.Choices[0].Message.ToolCalls; len(tc) != 1 || tc[0].Function.Name != "lookup_order" {
		t.Errorf("first step = %+v, want lookup_order", cc.Choices[0].Message)
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}
