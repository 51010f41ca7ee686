//! Real headless Chromium for the browser tests, driven over WebDriver (fantoccini talking plain
//! HTTP to Debian's chromedriver).
//!
//! Why WebDriver and fantoccini: chromedriver ships with Debian's chromium, the protocol is the W3C
//! standard (file inputs, screenshots, script execution are all first-class), and fantoccini is a
//! small tokio-native client that needs no TLS stack for a local driver and never downloads one.
//! One chromedriver process serves every test in the binary; each test opens its own session.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fantoccini::{Client, ClientBuilder, Locator};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Whether the browser tests can run. Outside CI a missing browser prints why and skips; in CI
/// (env `CI` set) it is a failure, so a broken setup never passes silently.
pub fn available(test: &str) -> bool {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER].into_iter().filter(|p| !Path::new(p).exists()).collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "{test}: skipped, {} not installed (`cargo xtask test` installs Debian's chromium and chromium-driver)",
        missing.join(" and ")
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}; CI must run the browser tests");
    }
    eprintln!("{msg}");
    false
}

struct Driver {
    port: u16,
    _child: Child,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self._child.kill();
    }
}

static DRIVER: OnceLock<Mutex<Option<Driver>>> = OnceLock::new();

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts chromedriver once for the whole test binary and returns its port.
fn driver_port() -> Result<u16> {
    let cell = DRIVER.get_or_init(|| Mutex::new(None));
    let mut guard = cell.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = guard.as_ref() {
        return Ok(d.port);
    }
    let port = free_port()?;
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting chromedriver")?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("chromedriver did not listen on port {port} within 15 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    *guard = Some(Driver { port, _child: child });
    Ok(port)
}

/// A headless Chromium session.
pub struct Browser {
    pub client: Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Result<Browser> {
        let port = driver_port()?;
        let profile = tempfile::tempdir()?;
        let args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1440,900".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), serde_json::json!({ "binary": CHROMIUM, "args": args }));
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .context("opening a chromedriver session")?;
        Ok(Browser { client, _profile: profile })
    }

    /// Opens `url` and waits until the viewer says it is ready (or failed to start).
    pub async fn open(&self, url: &str) -> Result<()> {
        self.client.goto(url).await?;
        let ready = self.wait_attr("body", "data-ready", Duration::from_secs(20)).await?;
        if ready != "1" {
            let text = self.client.find(Locator::Css("main")).await?.text().await.unwrap_or_default();
            bail!("the viewer did not start: {text}");
        }
        Ok(())
    }

    async fn wait_attr(&self, css: &str, attr: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.attr(css, attr).await? {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("{css}[{attr}] did not appear within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for an element matching `css` and returns it.
    pub async fn wait_for(&self, css: &str, timeout: Duration) -> Result<fantoccini::elements::Element> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(el) = self.client.find(Locator::Css(css)).await {
                return Ok(el);
            }
            if Instant::now() > deadline {
                let main = self.text("main").await.unwrap_or_default();
                bail!("`{css}` did not appear within {timeout:?}; the page shows: {main}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `attr` of the first element matching `css` (None where there is none or it lacks the
    /// attribute), read inside the page in one step: the viewer re-renders whole views as events
    /// arrive, so an element found in one WebDriver call may be gone by the next.
    pub async fn attr(&self, css: &str, attr: &str) -> Result<Option<String>> {
        let v = self
            .client
            .execute(
                "const e = document.querySelector(arguments[0]); return e ? e.getAttribute(arguments[1]) : null;",
                vec![css.into(), attr.into()],
            )
            .await?;
        Ok(v.as_str().map(str::to_string))
    }

    /// The rendered text of the first element matching `css`; found again where the page replaced
    /// it between the find and the read.
    pub async fn text(&self, css: &str) -> Result<String> {
        self.retry_replaced(css, |el| async move { el.text().await }).await
    }

    /// A real click (WebDriver's, at the element's place) on the first element matching `css`;
    /// found again where the page replaced it between the find and the click.
    pub async fn click(&self, css: &str) -> Result<()> {
        self.retry_replaced(css, |el| async move { el.click().await.map(drop) }).await
    }

    /// Runs `f` on the element `css` finds, finding it again (a few times) where the page
    /// replaced it in between: the stale-element error is the page re-rendering, not a failure.
    async fn retry_replaced<T, F, Fut>(&self, css: &str, f: F) -> Result<T>
    where
        F: Fn(fantoccini::elements::Element) -> Fut,
        Fut: std::future::Future<Output = Result<T, fantoccini::error::CmdError>>,
    {
        let mut tries = 0;
        loop {
            let el = self.client.find(Locator::Css(css)).await?;
            match f(el).await {
                Err(fantoccini::error::CmdError::Standard(e))
                    if e.error == fantoccini::error::ErrorStatus::StaleElementReference && tries < 5 =>
                {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => return Ok(other?),
            }
        }
    }

    /// Sets a local file on the page's file input, as a user picking it would.
    pub async fn choose_file(&self, input_css: &str, path: &Path) -> Result<()> {
        let input = self.client.find(Locator::Css(input_css)).await?;
        input.send_keys(&path.canonicalize()?.to_string_lossy()).await?;
        Ok(())
    }

    /// Saves a PNG screenshot of the page under `tests/artifacts/` and returns its path.
    pub async fn screenshot(&self, name: &str) -> Result<PathBuf> {
        let png = self.client.screenshot().await?;
        let dir = artifacts_dir();
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png)?;
        eprintln!("screenshot: {}", path.display());
        Ok(path)
    }

    pub async fn close(self) -> Result<()> {
        self.client.close().await?;
        Ok(())
    }
}

/// `tests/artifacts` of the checkout (git-ignored).
pub fn artifacts_dir() -> PathBuf {
    crate::repo_root().join("tests/artifacts")
}
