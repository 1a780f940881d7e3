// Package pagecheck opens collbench's HTML pages in headless Chromium, as
// a person would, and measures what they would see: console errors, the
// size of every plot, whether anything is wider than the window, where
// the verdict is, and whether the culprit is marked. It takes a
// screenshot of each page for a person to look at.
package pagecheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// ErrNoBrowser says no Chromium was found.
var ErrNoBrowser = errors.New("no Chromium found: install Debian's chromium package (apt-get install chromium) or set COLLBENCH_CHROMIUM to a Chromium or Chrome binary")

// FindBrowser is the Chromium to drive: $COLLBENCH_CHROMIUM, else the
// first of chromium, chromium-browser, google-chrome on PATH.
func FindBrowser() (string, error) {
	if p := os.Getenv("COLLBENCH_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("COLLBENCH_CHROMIUM=%s: %w", p, err)
		}
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoBrowser
}

// Box is an element's place on the page, in CSS pixels from the page's
// top left corner.
type Box struct {
	Top    float64 `json:"top"`
	Left   float64 `json:"left"`
	Width  float64 `json:"width"`
	Height float64 `json:"height"`
}

// Bottom is the box's lower edge.
func (b Box) Bottom() float64 { return b.Top + b.Height }

// Right is the box's right edge.
func (b Box) Right() float64 { return b.Left + b.Width }

// Page is what a page showed.
type Page struct {
	// Errors are console errors, uncaught exceptions and the browser's
	// own error log entries (a resource that failed to load).
	Errors []string
	// Plots are every SVG's box; Shapes counts each SVG's drawn shapes.
	Plots  []Box `json:"plots"`
	Shapes []int `json:"shapes"`
	// Window is the window's inner width; PageWidth the document's full
	// width (wider than Window means a sideways scroll); Widest is the
	// widest element's right edge outside a scrolling box.
	Window    float64 `json:"window"`
	PageWidth float64 `json:"pageWidth"`
	Widest    string  `json:"widest"`
	// Verdict is the verdict line's box (Height 0: none); VerdictText its
	// words.
	Verdict     Box    `json:"verdict"`
	VerdictText string `json:"verdictText"`
	// Culprits counts the visible cells marked as the culprit.
	Culprits int    `json:"culprits"`
	Title    string `json:"title"`
	// Screenshot is the whole page as PNG.
	Screenshot []byte `json:"-"`
}

// pageProbe runs in the page and returns what Page holds.
const pageProbe = `(() => {
  const box = e => { const b = e.getBoundingClientRect(); return {top: b.top + scrollY, left: b.left + scrollX, width: b.width, height: b.height}; };
  const v = document.querySelector('.verdict');
  const svgs = [...document.querySelectorAll('svg')];
  let widest = '';
  let right = innerWidth;
  for (const e of document.body.querySelectorAll('*')) {
    let p = e.parentElement, inScroll = false;
    while (p && p !== document.body) { const o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll' || o === 'hidden') { inScroll = true; break; } p = p.parentElement; }
    if (inScroll) continue;
    const b = e.getBoundingClientRect();
    if (b.right > right + 0.5) { right = b.right; widest = e.tagName.toLowerCase() + (e.className && e.className.baseVal === undefined ? '.' + e.className : '') + ' ' + Math.round(b.right) + 'px'; }
  }
  const culprits = [...document.querySelectorAll('.culprit')].filter(e => {
    const b = e.getBoundingClientRect(), s = getComputedStyle(e);
    return b.width > 0 && b.height > 0 && s.visibility !== 'hidden' && (s.outlineStyle !== 'none' || s.backgroundColor === 'rgb(0, 0, 0)');
  }).length;
  return {
    plots: svgs.map(box),
    shapes: svgs.map(s => s.querySelectorAll('path,line,polyline,circle,rect,text').length),
    window: innerWidth,
    pageWidth: document.documentElement.scrollWidth,
    widest: widest,
    verdict: v ? box(v) : {top: 0, left: 0, width: 0, height: 0},
    verdictText: v ? v.textContent.trim() : '',
    culprits: culprits,
    title: document.title,
  };
})()`

// Options set the window a page is opened in.
type Options struct {
	Browser       string
	Width, Height int
	// Timeout bounds opening and measuring one page (default 60 s).
	Timeout time.Duration
}

// Open loads the page at path in a fresh headless Chromium window and
// measures it.
func Open(ctx context.Context, path string, o Options) (*Page, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	// Chromium leaves its singleton socket's folder in $TMPDIR when it is
	// stopped rather than closed; give it a folder of its own to remove.
	tmp, err := os.MkdirTemp("", "collbench-pagecheck")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }() // after the browser has gone (acancel waits for it)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(o.Browser),
		chromedp.Env("TMPDIR="+tmp),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(o.Width, o.Height),
		chromedp.Flag("hide-scrollbars", false),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	tctx, tcancel := chromedp.NewContext(actx)
	defer tcancel()
	// Start the tab first, so the console is subscribed before the page loads.
	if err := chromedp.Do(tctx, chromedp.EmulateViewport(int64(o.Width), int64(o.Height))); err != nil {
		return nil, fmt.Errorf("starting %s: %w", o.Browser, err)
	}
	mctx, mcancel := context.WithCancel(tctx)
	messages := chromedp.Console(mctx)
	var errs []string
	read := make(chan struct{})
	go func() {
		defer close(read)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				errs = append(errs, strings.TrimSpace(m.String()+" "+m.URL))
			}
		}
	}()
	defer func() { mcancel(); <-read }()
	if err := chromedp.Do(tctx, chromedp.Navigate("file://"+abs), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		return nil, fmt.Errorf("opening %s in %s: %w", path, o.Browser, err)
	}
	p, err := chromedp.Run(tctx, chromedp.Evaluate[*Page](pageProbe))
	if err != nil {
		return nil, fmt.Errorf("measuring %s: %w", path, err)
	}
	if p.Screenshot, err = chromedp.Run(tctx, chromedp.FullScreenshot(100)); err != nil {
		return nil, fmt.Errorf("screenshot of %s: %w", path, err)
	}
	// Every message logged until now; then the subscription ends.
	_ = chromedp.Do(tctx, chromedp.Sleep(100*time.Millisecond))
	mcancel()
	<-read
	p.Errors = errs
	return p, nil
}
