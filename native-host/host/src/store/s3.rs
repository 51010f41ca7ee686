//! Archives in an S3-compatible object store (`--blobs s3://BUCKET?endpoint=URL`), through the
//! `object_store` crate.
//!
//! The key design decision: an object's key is its content (`blobs/<blake3>.recap`, as the file
//! store names its files), and an object store has no rename. So an upload streams, while it
//! arrives, into a multipart upload under a staging key (`uploads/<random>`), which S3 shows to no
//! one until it is completed; only after the whole archive was validated is the upload completed
//! and copied, server-side, to its content key, then listed in the index. An upload that fails or
//! is refused aborts its multipart upload and leaves nothing. Replays read archives through a
//! local cache (`cache/` of the data folder), filled on first use and checked against the hash, and
//! kept under a size (`cache_gib`, least recently used first: `cache.rs`); downloads read the object
//! by ranges (or the cached copy when there is one).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use tokio::runtime::Handle;

use super::{io_err, BlobStore, BlobStream, Download, StoreError};
use crate::secrets::{random_id, redact};

/// Parts of a multipart upload (S3 takes 5 MiB at least, but for the last).
const PART: usize = 8 << 20;
/// Parts in flight at once per upload: bounds the memory an upload holds to about 3 parts.
const PARTS_IN_FLIGHT: usize = 2;
/// A blob this young and in no index row may belong to an upload another replica is committing
/// right now: it is left alone by the cleanup at start.
const SETTLE: Duration = Duration::from_secs(600);

/// An S3 bucket (or a prefix in one) holding archives by their hash.
pub struct S3BlobStore {
    store: Arc<dyn ObjectStore>,
    /// `s3://bucket/prefix` with the endpoint, without credentials: for messages.
    name: String,
    prefix: String,
    cache: PathBuf,
    /// The cache's size in bytes.
    cache_max: u64,
    tmp: PathBuf,
    handle: Handle,
}

/// The S3 settings a URL may carry in its query, besides the AWS environment variables.
const QUERY_KEYS: &[&str] =
    &["endpoint", "region", "access_key_id", "secret_access_key", "session_token", "allow_http", "prefix", "cache_gib"];

impl S3BlobStore {
    /// Opens `s3://BUCKET[/PREFIX]?endpoint=URL&region=R&access_key_id=K&secret_access_key=S`; what
    /// the query leaves out comes from the usual AWS environment variables (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL`). An
    /// `http://` endpoint is allowed (a local S3-compatible server). `data` holds the cache (at most
    /// `cache_gib` GiB, 20 by default) and the temporary files of uploads. Checks that the bucket
    /// answers.
    pub fn open(url: &str, data: &Path, handle: Handle) -> Result<S3BlobStore, StoreError> {
        let parsed = url::Url::parse(url).map_err(|e| StoreError::Config(format!("--blobs {url}: {e}")))?;
        let bucket = parsed.host_str().filter(|b| !b.is_empty()).ok_or_else(|| {
            StoreError::Config(format!("--blobs {}: no bucket (s3://BUCKET?endpoint=URL)", redact(url)))
        })?;
        let mut builder = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
        // An unreachable store is an error within seconds, not after minutes of retries.
        builder = builder
            .with_retry(object_store::RetryConfig {
                max_retries: 3,
                retry_timeout: Duration::from_secs(15),
                ..Default::default()
            })
            .with_client_options(
                object_store::ClientOptions::new()
                    .with_connect_timeout(Duration::from_secs(3))
                    .with_timeout(Duration::from_secs(120)),
            );
        if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") {
            builder = builder.with_endpoint(endpoint);
        }
        let mut prefix = parsed.path().trim_matches('/').to_string();
        let mut cache_max = super::cache::DEFAULT_MAX;
        let mut endpoint = std::env::var("AWS_ENDPOINT_URL").ok();
        for (key, value) in parsed.query_pairs() {
            builder = match key.as_ref() {
                "endpoint" => {
                    endpoint = Some(value.to_string());
                    builder.with_endpoint(value.as_ref())
                }
                "region" => builder.with_region(value.as_ref()),
                "access_key_id" => builder.with_access_key_id(value.as_ref()),
                "secret_access_key" => builder.with_secret_access_key(value.as_ref()),
                "session_token" => builder.with_token(value.as_ref()),
                "allow_http" => builder.with_allow_http(value == "true"),
                "prefix" => {
                    prefix = value.trim_matches('/').to_string();
                    builder
                }
                "cache_gib" => {
                    let gib: f64 =
                        value.parse().ok().filter(|g: &f64| g.is_finite() && *g >= 0.0).ok_or_else(|| {
                            StoreError::Config(format!(
                                "--blobs {}: cache_gib {value:?} is not a size in GiB",
                                redact(url)
                            ))
                        })?;
                    cache_max = (gib * (1u64 << 30) as f64) as u64;
                    builder
                }
                other => {
                    return Err(StoreError::Config(format!(
                        "--blobs {}: unknown setting {other:?}; known: {}",
                        redact(url),
                        QUERY_KEYS.join(", ")
                    )))
                }
            };
        }
        if endpoint.as_deref().is_some_and(|e| e.starts_with("http://")) {
            builder = builder.with_allow_http(true);
        }
        let store = builder.build().map_err(|e| StoreError::Config(format!("--blobs {}: {e}", redact(url))))?;
        let place = if prefix.is_empty() { format!("s3://{bucket}") } else { format!("s3://{bucket}/{prefix}") };
        let name = match &endpoint {
            Some(e) => format!("{place} at {e}"),
            None => place,
        };
        let cache = data.join("cache");
        let tmp = data.join("tmp");
        for dir in [&cache, &tmp] {
            std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        }
        let s3 = S3BlobStore { store: Arc::new(store), name, prefix, cache, cache_max, tmp, handle };
        // One listing call: a wrong endpoint, bucket or key fails here, at start, with its reason.
        s3.block_on(async {
            let mut listing = s3.store.list(Some(&s3.key("blobs")));
            match listing.next().await {
                Some(Err(e)) => Err(e),
                _ => Ok(()),
            }
        })
        .map_err(|e| s3.error("listing", e))?;
        Ok(s3)
    }

    fn key(&self, rest: &str) -> Key {
        if self.prefix.is_empty() {
            Key::from(rest)
        } else {
            Key::from(format!("{}/{rest}", self.prefix))
        }
    }

    fn blob_key(&self, hash: &str) -> Key {
        self.key(&format!("blobs/{hash}.recap"))
    }

    fn cached(&self, hash: &str) -> PathBuf {
        self.cache.join(format!("{hash}.recap"))
    }

    /// Keeps the cache under its size once an archive entered it.
    fn trim_cache(&self) {
        match super::cache::trim(&self.cache, self.cache_max, super::cache::IN_USE, std::time::SystemTime::now()) {
            Ok(_) => {}
            Err(e) => tracing::warn!(cache = %self.cache.display(), "trimming the archive cache: {e}"),
        }
    }

    /// Runs a future of the object store from a blocking thread (every caller of the store's
    /// methods is one: the server runs them with `spawn_blocking`).
    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.handle.block_on(f)
    }

    /// The error of `doing` something with the store: unreachable when the request never got an
    /// answer.
    fn error(&self, doing: &str, e: object_store::Error) -> StoreError {
        let message = e.to_string();
        let unreachable = is_unreachable(&e);
        StoreError::Backend {
            what: if unreachable {
                format!("blob store {} unreachable while {doing}", self.name)
            } else {
                format!("blob store {} while {doing}", self.name)
            },
            message,
            unreachable,
        }
    }
}

/// Whether an object store error means no answer came (connection refused, timed out), rather than
/// an answer that refused.
fn is_unreachable(e: &object_store::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        let text = err.to_string().to_ascii_lowercase();
        if text.contains("error sending request")
            || text.contains("connection refused")
            || text.contains("timed out")
            || text.contains("connect")
        {
            return true;
        }
        source = err.source();
    }
    false
}

fn is_hash(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// An upload streaming into a multipart upload under a staging key.
struct S3Stream {
    upload: Option<WriteMultipart>,
    staging: Key,
    store: Arc<dyn ObjectStore>,
    name: String,
    handle: Handle,
}

impl BlobStream for S3Stream {
    fn write(&mut self, chunk: Bytes) -> Result<(), StoreError> {
        let upload = self.upload.as_mut().expect("an upload not yet finished");
        // The part uploads are tasks of the runtime; waiting for room bounds the memory they hold
        // and makes a slow store slow the upload down rather than fill the host.
        let _runtime = self.handle.enter();
        upload.put(chunk);
        self.handle.block_on(upload.wait_for_capacity(PARTS_IN_FLIGHT)).map_err(|e| StoreError::Backend {
            unreachable: is_unreachable(&e),
            what: format!("blob store {} while streaming an upload", self.name),
            message: e.to_string(),
        })
    }

    fn as_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

impl Drop for S3Stream {
    fn drop(&mut self) {
        // Neither completed nor handed on: the upload failed or was refused. Its parts go.
        if let Some(upload) = self.upload.take() {
            let staging = self.staging.clone();
            self.handle.spawn(async move {
                if let Err(e) = upload.abort().await {
                    tracing::warn!(key = %staging, "aborting a multipart upload: {e}");
                }
            });
        }
    }
}

impl BlobStore for S3BlobStore {
    fn create_temp(&self) -> Result<tempfile::NamedTempFile, StoreError> {
        tempfile::Builder::new()
            .prefix("upload-")
            .tempfile_in(&self.tmp)
            .map_err(io_err(format!("creating a temporary file in {}", self.tmp.display())))
    }

    fn stream(&self) -> Result<Option<Box<dyn BlobStream>>, StoreError> {
        let staging = self.key(&format!("uploads/{}", random_id()));
        let upload = self
            .block_on(self.store.put_multipart(&staging))
            .map_err(|e| self.error("starting a multipart upload", e))?;
        Ok(Some(Box::new(S3Stream {
            upload: Some(WriteMultipart::new_with_chunk_size(upload, PART)),
            staging,
            store: self.store.clone(),
            name: self.name.clone(),
            handle: self.handle.clone(),
        })))
    }

    fn commit(
        &self,
        temp: tempfile::NamedTempFile,
        hash: &str,
        streamed: Option<Box<dyn BlobStream>>,
    ) -> Result<(), StoreError> {
        assert!(is_hash(hash), "blob names are blake3 hashes");
        let target = self.blob_key(hash);
        match streamed.map(|s| s.as_any().downcast::<S3Stream>()) {
            Some(Ok(mut stream)) => {
                let upload = stream.upload.take().expect("an upload not yet finished");
                let staging = stream.staging.clone();
                let store = stream.store.clone();
                self.block_on(async {
                    upload.finish().await?;
                    let copied = store.copy(&staging, &target).await;
                    let _ = store.delete(&staging).await;
                    copied
                })
                .map_err(|e| self.error(&format!("storing archive {hash}"), e))?;
            }
            _ => {
                // Not streamed (an import from a file): one upload of the temporary file.
                let bytes = std::fs::read(temp.path()).map_err(io_err("reading an archive before storing it"))?;
                self.block_on(self.store.put(&target, Bytes::from(bytes).into()))
                    .map_err(|e| self.error(&format!("storing archive {hash}"), e))?;
            }
        }
        // This replica keeps the validated bytes: its replays need no download.
        let cached = self.cached(hash);
        match temp.persist(&cached) {
            Ok(_) => self.trim_cache(),
            Err(e) => tracing::debug!("not cached: {}", e.error),
        }
        Ok(())
    }

    fn local_path(&self, hash: &str) -> Result<PathBuf, StoreError> {
        let cached = self.cached(hash);
        if cached.is_file() {
            super::cache::touch(&cached);
            return Ok(cached);
        }
        let key = self.blob_key(hash);
        let mut temp = self.create_temp()?;
        let hashed = self
            .block_on(async {
                let mut stream = self.store.get(&key).await?.into_stream();
                let mut hasher = blake3::Hasher::new();
                while let Some(chunk) = stream.next().await {
                    let chunk = chunk?;
                    hasher.update(&chunk);
                    std::io::Write::write_all(&mut temp, &chunk)
                        .map_err(|e| object_store::Error::Generic { store: "cache", source: Box::new(e) })?;
                }
                Ok::<_, object_store::Error>(hasher.finalize().to_hex().to_string())
            })
            .map_err(|e| self.error(&format!("fetching archive {hash}"), e))?;
        if hashed != hash {
            return Err(StoreError::Corrupt(format!(
                "blob store {}: object {key} does not hold the bytes its name says (blake3 {hashed})",
                self.name
            )));
        }
        temp.persist(&cached).map_err(|e| StoreError::Io {
            what: format!("caching archive in {}", cached.display()),
            source: e.error,
        })?;
        self.trim_cache();
        Ok(cached)
    }

    fn contains(&self, hash: &str) -> Result<bool, StoreError> {
        match self.block_on(self.store.head(&self.blob_key(hash))) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.error(&format!("looking for archive {hash}"), e)),
        }
    }

    fn delete(&self, hash: &str) -> Result<(), StoreError> {
        let _ = std::fs::remove_file(self.cached(hash));
        match self.block_on(self.store.delete(&self.blob_key(hash))) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(&format!("deleting archive {hash}"), e)),
        }
    }

    fn hashes(&self) -> Result<Vec<String>, StoreError> {
        self.listed(None)
    }

    fn settled_hashes(&self) -> Result<Vec<String>, StoreError> {
        self.listed(Some(SETTLE))
    }

    fn download(&self, hash: &str) -> Result<Download, StoreError> {
        let cached = self.cached(hash);
        if cached.is_file() {
            super::cache::touch(&cached);
            return Ok(Download::File(cached));
        }
        Ok(Download::Object(Box::new(S3Read { store: self.store.clone(), key: self.blob_key(hash) })))
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    fn put_kept(&self, session: &str, file: &str, bytes: Vec<u8>) -> Result<bool, StoreError> {
        let key = self.key(&format!("sessions/{session}/{file}"));
        self.block_on(self.store.put(&key, Bytes::from(bytes).into()))
            .map_err(|e| self.error(&format!("keeping {file} of session {session}"), e))?;
        Ok(true)
    }

    fn kept(&self, session: &str, file: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = self.key(&format!("sessions/{session}/{file}"));
        let got = self.block_on(async {
            match self.store.get(&key).await {
                Ok(got) => got.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        got.map(|b| b.map(|b| b.to_vec())).map_err(|e| self.error(&format!("reading {file} of session {session}"), e))
    }
}

impl S3BlobStore {
    /// Hashes of the stored blobs; with `older`, only of those stored at least that long ago.
    fn listed(&self, older: Option<Duration>) -> Result<Vec<String>, StoreError> {
        let now = std::time::SystemTime::now();
        let prefix = self.key("blobs");
        self.block_on(async {
            let mut out = Vec::new();
            let mut listing = self.store.list(Some(&prefix));
            while let Some(meta) = listing.next().await {
                let meta = meta?;
                if let Some(older) = older {
                    let modified: std::time::SystemTime = meta.last_modified.into();
                    if now.duration_since(modified).unwrap_or_default() < older {
                        continue;
                    }
                }
                if let Some(hash) =
                    meta.location.filename().and_then(|f| f.strip_suffix(".recap")).filter(|h| is_hash(h))
                {
                    out.push(hash.to_string());
                }
            }
            Ok(out)
        })
        .map_err(|e| self.error("listing archives", e))
    }
}

/// A stored object read by ranges for downloads.
struct S3Read {
    store: Arc<dyn ObjectStore>,
    key: Key,
}

impl super::ObjectRead for S3Read {
    fn read(
        &self,
        range: Range<u64>,
    ) -> futures_util::future::BoxFuture<'static, Result<super::ByteStream, std::io::Error>> {
        let (store, key) = (self.store.clone(), self.key.clone());
        Box::pin(async move {
            let options = object_store::GetOptions { range: Some(range.into()), ..Default::default() };
            let got = store.get_opts(&key, options).await.map_err(std::io::Error::other)?;
            let stream: super::ByteStream = Box::pin(got.into_stream().map(|c| c.map_err(std::io::Error::other)));
            Ok(stream)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_err(url: &str) -> String {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let data = tempfile::tempdir().unwrap();
        match S3BlobStore::open(url, data.path(), runtime.handle().clone()) {
            Ok(_) => panic!("{url} opened"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn settings_that_are_not_understood_are_refused_before_any_request() {
        let e = open_err("s3://b?endpoint=http://127.0.0.1:9&cache_gib=lots");
        assert!(e.contains("cache_gib \"lots\" is not a size in GiB"), "{e}");
        let e = open_err("s3://b?endpoint=http://127.0.0.1:9&cache_gb=3");
        assert!(e.contains("unknown setting \"cache_gb\"") && e.contains("cache_gib"), "{e}");
        let e = open_err("s3://?endpoint=http://127.0.0.1:9");
        assert!(e.contains("no bucket"), "{e}");
    }
}
