//! The bank as a person uses it: a real headless Chromium (Debian's `/usr/bin/chromium`, driven
//! over the DevTools protocol) fills in and submits the gateway's forms of a `cloudbft demo`
//! cluster and reads the pages the replicas agreed on.
//!
//! Needs Debian's `chromium` package (`.ci/run` installs it); without it this test fails, it
//! never skips.

mod common;

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::{Browser, LaunchOptions, Tab};

const CHROMIUM: &str = "/usr/bin/chromium";
const BASE_PORT: u16 = 61400;
const GATEWAY_PORT: u16 = 63400;

/// How long one step (a page load, one agreed reply) may take on a loaded two-core machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts Chromium headless, without the sandbox (CI runs as root, where Chromium refuses to
/// start with it).
fn launch() -> Browser {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install Debian's chromium: apt-get install chromium"
    );
    let options = LaunchOptions::default_builder()
        .path(Some(CHROMIUM.into()))
        .headless(true)
        .sandbox(false)
        .window_size(Some((1024, 1400)))
        .args(vec![
            OsStr::new("--disable-dev-shm-usage"),
            OsStr::new("--no-proxy-server"),
        ])
        // A reply may take a while; the connection to the browser must outlive it.
        .idle_browser_timeout(Duration::from_secs(300))
        .build()
        .expect("Chromium launch options");
    Browser::new(options).unwrap_or_else(|e| panic!("starting {CHROMIUM}: {e:#}"))
}

/// What the page shows now, for failure messages.
fn describe(tab: &Tab) -> String {
    let content = tab
        .get_content()
        .unwrap_or_else(|e| format!("(no content: {e})"));
    format!("at {}: {content}", tab.get_url())
}

/// Polls `probe` until it gives a value, through page loads (while the browser navigates, DOM
/// queries fail); panics with the page after `STEP_TIMEOUT`.
fn wait_for<T>(tab: &Tab, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            start.elapsed() < STEP_TIMEOUT,
            "no {what} after {STEP_TIMEOUT:?}; page {}",
            describe(tab)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The trimmed text of the element `selector`, if the page has it.
fn text_of(tab: &Tab, selector: &str) -> Option<String> {
    let element = tab.find_element(selector).ok()?;
    element.get_inner_text().ok().map(|t| t.trim().to_owned())
}

/// The current value of the input `id`, as the form would send it.
fn value_of(tab: &Tab, id: &str) -> Option<String> {
    let value = tab
        .evaluate(&format!("document.getElementById('{id}').value"), false)
        .ok()?
        .value?;
    value.as_str().map(str::to_owned)
}

/// Loads the index, types `fields` into form `form` as a person would (click, then keys), submits
/// it with its button and returns the text of the agreed page's `#result`.
fn submit(tab: &Tab, index: &str, form: &str, fields: &[(&str, &str)]) -> String {
    let started = Instant::now();
    tab.navigate_to(index)
        .and_then(Tab::wait_until_navigated)
        .unwrap_or_else(|e| panic!("loading {index}: {e:#}"));
    let button = format!("#{form}-submit");
    wait_for(tab, &format!("form {form}"), || {
        tab.find_element(&format!("form#{form}")).ok()?;
        tab.find_element(&button).ok()
    });
    for (name, value) in fields {
        let id = format!("{form}-{name}");
        tab.find_element(&format!("#{id}"))
            .and_then(|input| input.type_into(value).map(|_| ()))
            .unwrap_or_else(|e| panic!("typing into #{id}: {e:#}; page {}", describe(tab)));
        assert_eq!(
            value_of(tab, &id).as_deref(),
            Some(*value),
            "#{id} does not hold what was typed"
        );
    }
    tab.find_element(&button)
        .and_then(|b| b.click().map(|_| ()))
        .unwrap_or_else(|e| panic!("clicking {button}: {e:#}; page {}", describe(tab)));
    // The index has no #result: it appears once the gateway returns the agreed page.
    let result = wait_for(tab, &format!("#result after submitting {form}"), || {
        text_of(tab, "#result")
    });
    // Each DevTools call takes up to 100 ms (headless_chrome's socket polls), so typing is slow.
    eprintln!("{form}: {result:?} after {:?}", started.elapsed());
    result
}

#[test]
fn bank_forms_in_a_real_browser() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    // Fail at once on a machine without Chromium, before starting a whole cluster.
    let browser = launch();
    let demo = common::Demo::start(
        &dir.path().join("cluster"),
        BASE_PORT,
        GATEWAY_PORT,
        &["--application", "bank"],
    );
    let index = format!("http://{}/", demo.gateway);
    eprintln!("cluster ready after {:?}", started.elapsed());

    let tab = browser.new_tab().expect("a browser tab");
    tab.set_default_timeout(STEP_TIMEOUT);

    let open = |branch: &str, number: &str| {
        submit(
            &tab,
            &index,
            "open",
            &[("branch", branch), ("number", number), ("cents", "1000")],
        )
    };
    assert_eq!(open("1", "7"), "Account 1/7 opened with balance 10.00.");
    assert_eq!(
        tab.get_title().expect("page title"),
        "cloudbft: Open account"
    );
    assert_eq!(open("2", "7"), "Account 2/7 opened with balance 10.00.");
    assert_eq!(
        submit(
            &tab,
            &index,
            "transfer",
            &[
                ("from_branch", "1"),
                ("from_number", "7"),
                ("to_branch", "2"),
                ("to_number", "7"),
                ("cents", "100"),
            ],
        ),
        "Transferred 1.00 from 1/7 to 2/7; balance of 1/7 is now 9.00."
    );
    assert_eq!(
        submit(&tab, &index, "balance", &[("branch", "2"), ("number", "7")]),
        "Balance of account 2/7: 11.00."
    );
    eprintln!("four forms submitted after {:?}", started.elapsed());

    // What a person sees last: the balance page.
    let png = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .expect("screenshot");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "the screenshot is not a PNG"
    );
    let shot = dir.path().join("balance.png");
    std::fs::write(&shot, &png).expect("writing the screenshot");
    let size = std::fs::metadata(&shot).expect("screenshot file").len();
    assert!(size > 0, "empty screenshot {}", shot.display());
    // Kept where a person can look at it after the run (the temp dir goes away).
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-balance.png");
    std::fs::copy(&shot, &target).expect("copying the screenshot");
    eprintln!("screenshot: {} ({size} bytes)", target.display());

    drop(tab);
    drop(browser);
    demo.stop();
    eprintln!("done after {:?}", started.elapsed());
}
