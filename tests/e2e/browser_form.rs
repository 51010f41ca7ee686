//! The replay form and the charts it leads to, in real headless Chromium against a real host
//! seeded with `recap examples`: fields that do not apply are disabled with their reason, a
//! comparison of an engine with itself is not offered, a comparison's page ends with nothing left
//! waiting, the warm-up iteration is marked apart from the scale, the devices' load follows a
//! session's end, and heatmaps say when their cells are block means.

use std::time::Duration;

use anyhow::Result;
use recap_tests::browser::{self, Browser};

use super::browser::{archives, click, seeded_host, select_value, start_cpu_replay, wait_attr_eq};

async fn id_of(url: &str, name: &str) -> Result<String> {
    let stored = archives(url).await?;
    stored.iter().find(|a| a.name == name).map(|a| a.id.clone()).ok_or_else(|| anyhow::anyhow!("{name} not seeded"))
}

/// Whether the element `css` is disabled, and the title of its label (the reason).
async fn disabled_with_reason(b: &Browser, css: &str) -> Result<(bool, String)> {
    let v = b
        .client
        .execute(
            "const e = document.querySelector(arguments[0]); const l = e.closest('label'); \
             return [e.disabled, (l && l.title) || ''];",
            vec![css.into()],
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// Waits until the page's script `js` (a boolean expression) holds.
async fn wait_true(b: &Browser, js: &str, what: &str, timeout: Duration) -> Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if b.client.execute(&format!("return !!({js});"), vec![]).await?.as_bool() == Some(true) {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!("{what} did not happen within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_form_offers_only_what_applies_and_a_comparison_ends_true() -> Result<()> {
    if !browser::available("the_replay_form_offers_only_what_applies_and_a_comparison_ends_true") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let host = seeded_host(dir.path())?;
    // dag-8-chains records no expected state; while-countdown does.
    let (dag, countdown) =
        (id_of(&host.url, "dag-8-chains.recap").await?, id_of(&host.url, "while-countdown.recap").await?);
    let b = Browser::start().await?;
    b.open(&format!("{}/archives/{dag}#replay", host.url)).await?;
    b.wait_for("#r-device option[value='cpu']", Duration::from_secs(10)).await?;

    // The labels say the engine: the host's CPU device is the jit engine, and the compare list
    // does not offer the jit engine beside it.
    let cpu = b.text("#r-device option[value='cpu']").await?;
    assert!(cpu.contains("jit engine"), "{cpu}");
    assert_eq!(b.text("#r-compare option[value='interp']").await?, "host CPU, interp engine");
    select_value(&b, "#r-device", "cpu").await?;
    assert_eq!(b.attr("#r-compare option[value='jit']", "disabled").await?.as_deref(), Some(""));
    assert_eq!(b.attr("#r-compare option[value='interp']", "disabled").await?, None);

    // No expected state: the check is off, and says why.
    let (off, why) = disabled_with_reason(&b, "#r-check").await?;
    assert!(off && why.contains("no expected state"), "{off} {why}");
    assert!(b.text("#r-form-note").await?.contains("no expected state"));

    // In this browser there is no comparison: the compare list is off, with the reason.
    select_value(&b, "#r-device", "browser").await?;
    let (off, why) = disabled_with_reason(&b, "#r-compare").await?;
    assert!(off && why.contains("run on the host"), "{off} {why}");
    select_value(&b, "#r-device", "cpu").await?;
    assert!(!disabled_with_reason(&b, "#r-compare").await?.0);

    // A comparison runs one iteration on each side: iterations are off, with the reason.
    select_value(&b, "#r-compare", "interp").await?;
    let (off, why) = disabled_with_reason(&b, "#r-iters").await?;
    assert!(off && why.contains("one iteration on each side"), "{off} {why}");
    click(&b, "#r-start").await?;
    wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(120)).await?;
    let verdict = b.wait_for("#cmp-verdict", Duration::from_secs(10)).await?.text().await?;
    assert!(verdict.contains("jit") && verdict.contains("interp"), "the two engines by name: {verdict}");
    // Its page ends in a true state: no "0/1 iterations", no panel still waiting for iterations,
    // a check or regions that a comparison never sends.
    assert!(b.client.find(fantoccini::Locator::Css("#r-progress")).await.is_err(), "no iteration progress");
    for panel in ["#r-iter-chart", "#r-check-table", "#r-regions", "#r-op-chart"] {
        let hidden = b
            .client
            .execute("return document.querySelector(arguments[0]).parentElement.hidden;", vec![panel.into()])
            .await?;
        assert_eq!(hidden.as_bool(), Some(true), "{panel} is not shown for a comparison");
    }
    b.screenshot("browser-compare-form").await?;

    // An archive with an expected state: the check is on again.
    b.open(&format!("{}/archives/{countdown}#replay", host.url)).await?;
    b.wait_for("#r-device option[value='cpu']", Duration::from_secs(10)).await?;
    assert!(!disabled_with_reason(&b, "#r-check").await?.0, "while-countdown records its expected state");
    b.close().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warm_up_stands_apart_and_the_devices_load_follows_a_session() -> Result<()> {
    if !browser::available("the_warm_up_stands_apart_and_the_devices_load_follows_a_session") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let host = seeded_host(dir.path())?;
    let (dag, heat) = (id_of(&host.url, "dag-8-chains.recap").await?, id_of(&host.url, "heat-step.recap").await?);
    let b = Browser::start().await?;

    // 20 iterations: the first (code compiled) is a mark apart, never a bar on the others' scale,
    // and the summary gives it apart.
    b.open(&format!("{}/archives/{dag}#replay", host.url)).await?;
    start_cpu_replay(&b, 20).await?;
    b.wait_for("#r-iter-chart .warm-up", Duration::from_secs(5)).await?;
    assert!(b.client.find(fantoccini::Locator::Css("#r-iter-chart .warm-up rect")).await.is_err(), "not a bar");
    let warm_ms: f64 = b.attr("#r-iter-chart .warm-up", "data-ms").await?.unwrap_or_default().parse()?;
    let stats = b.text("#r-iter-stats").await?;
    assert!(stats.contains("19 iterations") && stats.contains("warm-up (iteration 1)"), "{stats}");
    let off_scale = b
        .client
        .execute("return document.querySelector('#r-iter-chart .warm-up').textContent;", vec![])
        .await?
        .as_str()
        .is_some_and(|t| t.contains("off scale"));
    // Off scale exactly when the warm-up is slower than every later iteration's bucket top.
    let tips = b.attr("#r-iter-chart rect.hover", "data-tips").await?.unwrap_or_default();
    let max_rest = tips
        .split('|')
        .filter_map(|t| t.rsplit(": ").next())
        .filter_map(|v| {
            let (n, unit) = v.split_once(' ')?;
            let n: f64 = n.parse().ok()?;
            Some(match unit {
                "s" => n * 1000.0,
                "µs" => n / 1000.0,
                _ => n,
            })
        })
        .fold(0.0f64, f64::max);
    // (The tips' values are rounded: a warm-up within 2% of the others' top may go either way.)
    let why = format!("warm-up {warm_ms} ms against the others' {max_rest} ms");
    if warm_ms > max_rest * 1.02 {
        assert!(off_scale, "{why}");
    } else if warm_ms < max_rest * 0.98 {
        assert!(!off_scale, "{why}");
    }

    // The devices' load the form shows follows a session to its end without a reload: a long
    // session opened by its link counts as running, and once stopped it does not.
    let client = reqwest::Client::new();
    let created: serde_json::Value = client
        .post(format!("{}/api/sessions", host.url))
        .json(&serde_json::json!({ "archive": dag, "device": "cpu", "iterations": 100000, "check": false }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let (id, control) = (created["id"].as_str().unwrap_or_default(), created["control"].as_str().unwrap_or_default());
    b.open(&format!("{}/sessions/{id}?control={control}", host.url)).await?;
    wait_true(
        &b,
        "(document.querySelector(\"#r-device option[value='cpu']\") || {}).textContent?.includes('1 running')",
        "the CPU's label counting the session",
        Duration::from_secs(20),
    )
    .await?;
    click(&b, "#r-cancel").await?;
    wait_attr_eq(&b, "#r-state", "data-state", "cancelled", Duration::from_secs(30)).await?;
    wait_true(
        &b,
        "!document.querySelector(\"#r-device option[value='cpu']\").textContent.includes('running')",
        "the CPU's label dropping the ended session",
        Duration::from_secs(10),
    )
    .await?;

    // A 96×64 field drawn in fewer cells: its caption says the cells are block means, with their range.
    b.open(&format!("{}/archives/{heat}#replay", host.url)).await?;
    start_cpu_replay(&b, 1).await?;
    b.wait_for("[data-out-region] .hm-caption", Duration::from_secs(10)).await?;
    let caption = b.text("[data-out-region] .hm-caption[data-averaged='true']").await?;
    assert!(
        caption.contains("cells, each the mean of a block of up to") && caption.contains("block means"),
        "{caption}"
    );
    assert!(b.text("[data-out-region] .hm-legend").await?.contains("block means"));
    b.close().await
}
