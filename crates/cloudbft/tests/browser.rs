//! The web tier as a person uses it: a real headless Chromium (Debian's `/usr/bin/chromium`,
//! driven over the DevTools protocol) fills in and submits the gateway's forms of a `cloudbft
//! demo` cluster and reads the pages the replicas agreed on: the bank's, and TPC-C's five
//! transactions with the refusals of bad input.
//!
//! Needs Debian's `chromium` package (`.ci/run` installs it); without it these tests fail, they
//! never skip.

mod common;

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::{Browser, LaunchOptions, Tab};

const CHROMIUM: &str = "/usr/bin/chromium";

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

/// A browser tab on a `cloudbft demo` cluster's gateway.
struct Session {
    started: Instant,
    // Declared (so dropped) before the browser it belongs to.
    tab: Arc<Tab>,
    browser: Browser,
    demo: common::Demo,
    /// The gateway's index page.
    index: String,
}

impl Session {
    /// Starts Chromium, then `cloudbft demo` in `dir` with `extra` arguments, and opens a tab.
    fn start(dir: &Path, extra: &[&str]) -> Session {
        let started = Instant::now();
        // Fail at once on a machine without Chromium, before starting a whole cluster.
        let browser = launch();
        let ports = common::Ports::reserve();
        let demo = common::Demo::start(&dir.join("cluster"), &ports, extra);
        let index = format!("http://{}/", demo.gateway);
        eprintln!("cluster ready after {:?}", started.elapsed());
        let tab = browser.new_tab().expect("a browser tab");
        tab.set_default_timeout(STEP_TIMEOUT);
        Session {
            started,
            tab,
            browser,
            demo,
            index,
        }
    }

    /// Closes the browser and stops the cluster (panics if it does not stop cleanly).
    fn finish(self) {
        let Session {
            started,
            tab,
            browser,
            demo,
            index: _,
        } = self;
        drop(tab);
        drop(browser);
        demo.stop();
        eprintln!("done after {:?}", started.elapsed());
    }
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

/// The text of the element with `id`, once the page has it.
fn shown(tab: &Tab, id: &str) -> String {
    let selector = format!("#{id}");
    wait_for(tab, &selector, || text_of(tab, &selector))
}

/// What the JavaScript `expression` gives, if it is a string.
fn eval_string(tab: &Tab, expression: &str) -> Option<String> {
    let value = tab.evaluate(expression, false).ok()?.value?;
    value.as_str().map(str::to_owned)
}

/// What the JavaScript `expression` gives, which must be a boolean.
fn eval_bool(tab: &Tab, expression: &str) -> bool {
    let value = tab
        .evaluate(expression, false)
        .unwrap_or_else(|e| panic!("evaluating {expression}: {e:#}; page {}", describe(tab)))
        .value;
    value
        .and_then(|v| v.as_bool())
        .unwrap_or_else(|| panic!("{expression} is not a boolean; page {}", describe(tab)))
}

/// The current value of the input `id`, as the form would send it.
fn value_of(tab: &Tab, id: &str) -> Option<String> {
    eval_string(tab, &format!("document.getElementById('{id}').value"))
}

/// Loads the gateway's index.
fn load_index(tab: &Tab, index: &str) {
    tab.navigate_to(index)
        .and_then(Tab::wait_until_navigated)
        .unwrap_or_else(|e| panic!("loading {index}: {e:#}"));
}

/// Follows the agreed page's link back to the forms, as a person would.
fn back(tab: &Tab) {
    tab.find_element("a[href='/']")
        .and_then(|link| link.click().map(|_| ()))
        .unwrap_or_else(|e| panic!("following the link back: {e:#}; page {}", describe(tab)));
}

/// Once the index (being) loaded shows form `form`, types `fields` into it as a person would
/// (click, then keys).
fn fill(tab: &Tab, form: &str, fields: &[(&str, &str)]) {
    wait_for(tab, &format!("form {form}"), || {
        tab.find_element(&format!("form#{form}")).ok()?;
        tab.find_element(&format!("#{form}-submit")).ok()
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
}

/// Clicks form `form`'s button.
fn click_submit(tab: &Tab, form: &str) {
    let button = format!("#{form}-submit");
    tab.find_element(&button)
        .and_then(|b| b.click().map(|_| ()))
        .unwrap_or_else(|e| panic!("clicking {button}: {e:#}; page {}", describe(tab)));
}

/// Fills in form `form` of the index (being) loaded, submits it with its button and returns the
/// text of the agreed page's `#result`.
fn submit_here(tab: &Tab, form: &str, fields: &[(&str, &str)]) -> String {
    let started = Instant::now();
    fill(tab, form, fields);
    click_submit(tab, form);
    // The index has no #result: it appears once the gateway returns the agreed page.
    let result = wait_for(tab, &format!("#result after submitting {form}"), || {
        text_of(tab, "#result")
    });
    // Each DevTools call takes up to 100 ms (headless_chrome's socket polls), so typing is slow.
    eprintln!("{form}: {result:?} after {:?}", started.elapsed());
    result
}

/// Loads the index, then [`submit_here`].
fn submit(tab: &Tab, index: &str, form: &str, fields: &[(&str, &str)]) -> String {
    load_index(tab, index);
    submit_here(tab, form, fields)
}

/// After form `form` was sent with bad input: the gateway's 400 page, whose message is
/// returned (nothing reached the cluster).
fn refused(tab: &Tab, form: &str, action: &str) -> String {
    let started = Instant::now();
    wait_for(tab, &format!("the gateway's refusal of {form}"), || {
        text_of(tab, "h1").filter(|h| h == "Bad request")
    });
    let message = wait_for(tab, "the refusal's message", || text_of(tab, "p"));
    assert_eq!(tab.get_title().expect("page title"), "Bad request");
    assert!(
        tab.get_url().ends_with(action),
        "the refusal is not {action}'s answer: {}",
        describe(tab)
    );
    // The navigation's HTTP status, as the browser received it.
    let status = tab
        .evaluate(
            "performance.getEntriesByType('navigation')[0].responseStatus",
            false,
        )
        .ok()
        .and_then(|v| v.value)
        .and_then(|v| v.as_u64());
    assert_eq!(status, Some(400), "{}", describe(tab));
    eprintln!("{form} refused: {message:?} after {:?}", started.elapsed());
    message
}

/// Saves what the tab shows as `name`.png where a person can look at it after the run (the
/// temp dir `dir` goes away).
fn screenshot(tab: &Tab, dir: &Path, name: &str) {
    let png = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .expect("screenshot");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "the screenshot is not a PNG"
    );
    let shot = dir.join(format!("{name}.png"));
    std::fs::write(&shot, &png).expect("writing the screenshot");
    let size = std::fs::metadata(&shot).expect("screenshot file").len();
    assert!(size > 0, "empty screenshot {}", shot.display());
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("browser-{name}.png"));
    std::fs::copy(&shot, &target).expect("copying the screenshot");
    eprintln!("screenshot: {} ({size} bytes)", target.display());
}

#[test]
fn bank_forms_in_a_real_browser() {
    let dir = tempfile::tempdir().expect("temp dir");
    let session = Session::start(dir.path(), &["--application", "bank"]);
    let (tab, index) = (&session.tab, &session.index);

    let open = |branch: &str, number: &str| {
        submit(
            tab,
            index,
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
            tab,
            index,
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
        submit(tab, index, "balance", &[("branch", "2"), ("number", "7")]),
        "Balance of account 2/7: 11.00."
    );
    eprintln!("four forms submitted after {:?}", session.started.elapsed());

    // What a person sees last: the balance page.
    screenshot(tab, dir.path(), "balance");
    cluster_page(tab, index, dir.path());
    session.finish();
}

/// The live cluster page, reached from the index's link: it shows the demo's two groups of
/// three with their machines, the traffic of the forms just submitted, the database nodes'
/// progress, and it updates without a reload (its script runs under the page's policy).
fn cluster_page(tab: &Tab, index: &str, dir: &Path) {
    load_index(tab, index);
    tab.find_element("#cluster-link")
        .and_then(|link| link.click().map(|_| ()))
        .unwrap_or_else(|e| panic!("following the cluster link: {e:#}; page {}", describe(tab)));
    wait_for(tab, "the cluster page's data", || {
        (text_of(tab, "#group-count")? == "2").then_some(())
    });
    assert_eq!(shown(tab, "epoch"), "1");
    let rows = |table: &str| {
        eval_string(
            tab,
            &format!("String(document.querySelectorAll('#{table} tbody tr').length)"),
        )
    };
    assert_eq!(rows("groups").as_deref(), Some("2"));
    assert_eq!(rows("dbnodes").as_deref(), Some("3"));
    // Awaited, not read once: the page rewrites its tables as it updates, and an element found
    // just before a rewrite has no text left to read.
    wait_for(
        tab,
        "three members on machines in the first group's row",
        || {
            text_of(tab, "#groups tbody tr td:nth-child(3)")
                .filter(|m| m.matches("(m").count() == 3)
        },
    );
    // The forms went through some group within the last ten seconds.
    let busiest = "String(Math.max(...[...document.querySelectorAll('#groups tbody tr \
                   td:nth-child(4)')].map(td => parseFloat(td.textContent))))";
    let ops: f64 = eval_string(tab, busiest)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(ops > 0.0, "no throughput shown; page {}", describe(tab));
    // Database progress comes from the nodes' metrics, the view from the replicas'.
    wait_for(tab, "the database nodes' executed order", || {
        let order = text_of(tab, "#dbnodes tbody tr td:nth-child(3)")?;
        order.parse::<u64>().ok().filter(|&o| o >= 4)
    });
    assert_eq!(shown(tab, "view"), "0");
    // Updated in place: the timestamp moves and the chart is drawn, with no navigation.
    let url = tab.get_url();
    let first = shown(tab, "updated");
    wait_for(tab, "a later update", || {
        text_of(tab, "#updated").filter(|t| *t != first)
    });
    assert_eq!(tab.get_url(), url, "the page must not reload");
    assert!(eval_bool(
        tab,
        "document.querySelectorAll('#history polyline').length === 3"
    ));
    screenshot(tab, dir, "cluster");
}

/// The demo's default application: TPC-C on the small population (4 warehouses of 10
/// districts of 100 customers and 100 orders, the last 30 undelivered; 1,000 items).
#[test]
fn tpcc_forms_in_a_real_browser() {
    let dir = tempfile::tempdir().expect("temp dir");
    let session = Session::start(dir.path(), &[]);
    let tab: &Tab = &session.tab;

    // The index links its five forms, each to a form on the page.
    load_index(tab, &session.index);
    wait_for(tab, "the index", || text_of(tab, "nav"));
    assert_eq!(tab.get_title().expect("page title"), "CloudBFT TPC-C");
    let links = eval_string(
        tab,
        "Array.from(document.querySelectorAll('nav a'), a => a.getAttribute('href') + ' ' + \
         a.textContent + ' ' + (document.querySelector(a.getAttribute('href')) instanceof \
         HTMLFormElement)).join('\\n')",
    );
    assert_eq!(
        links.as_deref(),
        Some(
            "#new_order New-Order true\n#payment Payment true\n#order_status Order-Status true\n\
             #delivery Delivery true\n#stock_level Stock-Level true"
        ),
        "{}",
        describe(tab)
    );

    // Two lines, the second from warehouse 2: a multi-partition transaction. The loaded
    // districts have orders 1 to 100.
    let customer = [("w_id", "1"), ("d_id", "1"), ("c_id", "1")];
    let lines = [
        ("ol_i_id_1", "1"),
        ("ol_quantity_1", "3"),
        ("ol_i_id_2", "2"),
        ("ol_supply_w_id_2", "2"),
        ("ol_quantity_2", "4"),
    ];
    submit_here(tab, "new_order", &[&customer[..], &lines[..]].concat());
    assert_eq!(tab.get_title().expect("page title"), "cloudbft: New-Order");
    assert_eq!(shown(tab, "status"), "Order 101 entered.");
    assert_eq!(shown(tab, "o_id"), "101");
    assert_eq!(shown(tab, "c_last"), "BARBARBAR");
    assert_eq!(shown(tab, "o_ol_cnt"), "2");
    let total = shown(tab, "total_amount");
    assert!(is_money(&total), "total {total:?}");
    // Supply warehouse, item, quantity of each line.
    let ordered = eval_string(
        tab,
        "Array.from(document.querySelectorAll('#lines tbody tr'), r => [0, 1, 3].map(i => \
         r.cells[i].textContent).join(' ')).join('\\n')",
    );
    assert_eq!(
        ordered.as_deref(),
        Some("1 1 3\n2 2 4"),
        "{}",
        describe(tab)
    );

    // Customer 1 of district 1 by last name: c_balance starts at -10.00.
    back(tab);
    submit_here(
        tab,
        "payment",
        &[
            ("w_id", "1"),
            ("d_id", "1"),
            ("c_w_id", "1"),
            ("c_d_id", "1"),
            ("c_last", "BARBARBAR"),
            ("h_amount", "12.34"),
        ],
    );
    assert_eq!(shown(tab, "status"), "Payment of 12.34 entered.");
    assert_eq!(shown(tab, "c_id"), "1");
    assert_eq!(shown(tab, "h_amount"), "12.34");
    assert_eq!(shown(tab, "c_balance"), "-22.34");

    back(tab);
    submit_here(tab, "order_status", &customer);
    assert_eq!(
        shown(tab, "status"),
        "Order 101 is the customer's last order."
    );
    assert_eq!(shown(tab, "o_id"), "101");
    assert_eq!(shown(tab, "o_carrier_id"), "not delivered");
    assert_eq!(shown(tab, "c_balance"), "-22.34");
    screenshot(tab, dir.path(), "order-status");

    // Each district's oldest undelivered order is 71.
    back(tab);
    submit_here(tab, "delivery", &[("w_id", "1"), ("o_carrier_id", "3")]);
    assert_eq!(
        shown(tab, "status"),
        "Orders delivered: 10. Districts skipped (no undelivered order): 0."
    );
    assert_eq!(shown(tab, "o_carrier_id"), "3");
    let first = eval_string(
        tab,
        "Array.from(document.querySelector('#delivered tbody tr').cells, c => c.textContent)\
         .join(' ')",
    );
    assert_eq!(first.as_deref(), Some("1 71"), "{}", describe(tab));

    back(tab);
    submit_here(
        tab,
        "stock_level",
        &[("w_id", "1"), ("d_id", "1"), ("threshold", "15")],
    );
    let low = shown(tab, "low_stock");
    assert!(low.parse::<u32>().is_ok(), "low stock {low:?}");
    assert_eq!(shown(tab, "threshold"), "15");

    // Out of the specification's ranges: the browser itself will not send quantity 11 or
    // warehouse 9 of 4 (the inputs carry the ranges)...
    back(tab);
    let bad_quantity = [("ol_i_id_1", "1"), ("ol_quantity_1", "11")];
    fill(
        tab,
        "new_order",
        &[&customer[..], &bad_quantity[..]].concat(),
    );
    click_submit(tab, "new_order");
    assert!(eval_bool(
        tab,
        "document.getElementById('new_order-ol_quantity_1').validity.rangeOverflow \
         && !document.getElementById('new_order').checkValidity()"
    ));
    // ...and the gateway refuses them, naming the field, from a client that does not check
    // (the form's `novalidate`, which a page can set; the assignment evaluates to true).
    assert!(eval_bool(
        tab,
        "document.getElementById('new_order').noValidate = true"
    ));
    click_submit(tab, "new_order");
    let message = refused(tab, "new_order", "/tpcc/new-order");
    assert!(
        message.starts_with("New-Order: ol_quantity_1: 11 is out of range"),
        "{message}"
    );
    back(tab);
    let unknown = [("w_id", "9"), ("d_id", "1"), ("c_id", "1")];
    fill(tab, "new_order", &[&unknown[..], &lines[..2]].concat());
    assert!(eval_bool(
        tab,
        "document.getElementById('new_order-w_id').validity.rangeOverflow \
         && (document.getElementById('new_order').noValidate = true)"
    ));
    click_submit(tab, "new_order");
    let message = refused(tab, "new_order", "/tpcc/new-order");
    assert!(
        message.starts_with("New-Order: w_id: warehouse 9 does not exist"),
        "{message}"
    );
    eprintln!(
        "TPC-C forms submitted after {:?}",
        session.started.elapsed()
    );
    session.finish();
}

/// Whether `text` is an amount as the pages show it: `12.34`.
fn is_money(text: &str) -> bool {
    text.split_once('.').is_some_and(|(units, cents)| {
        !units.is_empty()
            && units.bytes().all(|b| b.is_ascii_digit())
            && cents.len() == 2
            && cents.bytes().all(|b| b.is_ascii_digit())
    })
}
