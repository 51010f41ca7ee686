//! Input built to exhaust the host: Warp captures and bundles whose sizes and counts are lies,
//! archives that declare regions of exabytes, a host killed in the middle of a conversion. The
//! host runs with its address space capped (`Server::start_capped`), so input that makes it
//! allocate what it was told instead of what it needs kills it and fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use recap_tests::recap_bin;
use recap_tests::server::Server;
use serde_json::Value;

use super::hardening::{declared_region, error_of, spin_archive};
use super::host::{collect_stream, get_json, upload};

/// The address space the capped hosts get: room for what they need, far short of what the inputs
/// below ask for.
const CAP: u64 = 1 << 30;

/// A `.wrp` (NVIDIA Warp capture, docs/FORMAT.md "Warp captures") of a CPU capture: `bindings`
/// (name, region), `regions` (id, size; no contents) and `ops` (each a whole op record).
fn wrp(bindings: &[(String, u32)], regions: &[(u32, u64)], ops: &[Vec<u8>]) -> Vec<u8> {
    let mut meta = Vec::new();
    meta.extend(18u32.to_le_bytes());
    meta.extend(6u32.to_le_bytes());
    meta.extend(b"1.19.0");
    meta.extend(0u32.to_le_bytes());
    for count in [0u32, 0, bindings.len() as u32, 0, 0] {
        meta.extend(count.to_le_bytes());
    }
    for (name, region) in bindings {
        meta.extend((name.len() as u32).to_le_bytes());
        meta.extend(name.as_bytes());
        meta.extend(region.to_le_bytes());
    }
    let mut memory = (regions.len() as u32).to_le_bytes().to_vec();
    for (id, size) in regions {
        memory.extend(id.to_le_bytes());
        memory.extend(1u32.to_le_bytes());
        memory.extend(size.to_le_bytes());
        memory.extend([0u8; 8]);
    }
    let mut operations = (ops.len() as u32).to_le_bytes().to_vec();
    for op in ops {
        operations.extend(op);
    }
    let mut out = b"WRP1".to_vec();
    for word in [18u32, 0, 3] {
        out.extend(word.to_le_bytes());
    }
    out.extend(64u64.to_le_bytes());
    out.push(1);
    out.extend([0u8; 3 + 4 + 32]);
    let mut offset = 64 + 3 * 32u64;
    for (kind, section) in [(1u32, &meta), (2, &memory), (3, &operations)] {
        out.extend(kind.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend(offset.to_le_bytes());
        out.extend((section.len() as u64).to_le_bytes());
        out.extend((section.len() as u64).to_le_bytes());
        offset += section.len() as u64;
    }
    for section in [meta, memory, operations] {
        out.extend(section);
    }
    out
}

/// Warp's MEMTILE: `count` copies of `value` from byte 0 of `region`.
fn memtile(region: i32, count: u64, value: &[u8]) -> Vec<u8> {
    let mut op = 10u32.to_le_bytes().to_vec();
    op.extend(((32 + value.len()) as u32).to_le_bytes());
    op.extend(region.to_le_bytes());
    op.extend((value.len() as u32).to_le_bytes());
    op.extend(0u64.to_le_bytes());
    op.extend(count.to_le_bytes());
    op.extend(value);
    op
}

/// The 290-byte capture of one 4-byte region and a fill of 2^38 3-byte values into it.
fn terabyte_fill() -> Vec<u8> {
    wrp(&[("x".into(), 1)], &[(1, 4)], &[memtile(1, 1 << 38, &[1, 2, 3])])
}

/// Runs a Python script (`args` as `sys.argv[1:]`) that writes a bundle.
fn python(script: &str, args: &[&str]) {
    let status = Command::new("python3").arg("-c").arg(script).args(args).status().expect("python3");
    assert!(status.success(), "python3 failed");
}

/// A tar (gzip-compressed when `out` ends in `.gz`) of `files` (name in the tar, bytes).
fn tar_of(out: &Path, files: &[(&str, &[u8])]) -> Vec<u8> {
    let dir = out.with_extension("parts");
    let mut args = vec![out.display().to_string()];
    for (i, (name, bytes)) in files.iter().enumerate() {
        std::fs::create_dir_all(&dir).unwrap();
        let part = dir.join(i.to_string());
        std::fs::write(&part, bytes).unwrap();
        args.extend([part.display().to_string(), name.to_string()]);
    }
    let script = "import sys, tarfile\n\
                  out = sys.argv[1]\n\
                  with tarfile.open(out, 'w:gz' if out.endswith('.gz') else 'w', format=tarfile.GNU_FORMAT) as t:\n\
                  \x20   for src, name in zip(sys.argv[2::2], sys.argv[3::2]):\n\
                  \x20       t.add(src, name)\n";
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    python(script, &refs);
    std::fs::read(out).unwrap()
}

async fn post_bundle(client: &reqwest::Client, url: &str, content_type: &str, body: Vec<u8>) -> (u16, String, String) {
    let res = client.post(format!("{url}/api/archives")).header("content-type", content_type).body(body);
    error_of(res.send().await.unwrap()).await
}

/// Whether the host still answers.
async fn alive(client: &reqwest::Client, url: &str) -> bool {
    get_json(client, &format!("{url}/api/archives")).await.0 == 200
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captures_and_bundles_that_lie_about_sizes_are_refused_by_a_host_that_lives() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = d.join("data");
    let server = Server::start_capped(&data, &["--max-upload", "2147483648"], CAP);
    let client = reqwest::Client::new();
    let url = &server.url;
    let data_path = std::fs::canonicalize(&data).unwrap().display().to_string();

    // A fill that would expand to 768 GiB.
    let capture = terabyte_fill();
    assert!(capture.len() < 300, "{}", capture.len());
    let bundle = tar_of(&d.join("fill.tar"), &[("cap/fill.wrp", &capture)]);
    let (status, code, message) = post_bundle(&client, url, "application/x-tar", bundle).await;
    assert_eq!((status, code.as_str()), (422, "invalid_capture"), "{message}");
    assert!(message.contains("a fill of 274877906944 values of 3 bytes"), "{message}");
    // The message names the file relative to the data folder, never where the host keeps it.
    assert!(!message.contains(&data_path) && message.contains("bundle/cap/fill.wrp"), "{message}");
    assert!(alive(&client, url).await, "the host died of a 290-byte capture");

    // A region of 2^62 bytes without contents: refused by the replay limits, named.
    let capture = wrp(&[("huge".into(), 1)], &[(1, 1 << 62)], &[]);
    let bundle = tar_of(&d.join("huge.tar"), &[("huge.wrp", &capture)]);
    let (status, _, message) = post_bundle(&client, url, "application/x-tar", bundle).await;
    assert!(
        status == 422 && message.contains("region \"huge\"") && message.contains("--max-region-bytes"),
        "{message}"
    );

    // A GNU long name of 1.2 GB, gzip-compressed to about a megabyte: the name is refused after
    // 4 KiB, and the refusal does not echo it.
    let long = d.join("long.tar.gz");
    python(
        "import gzip, sys, tarfile\n\
         n = 1_200_000_000\n\
         info = tarfile.TarInfo('././@LongLink'); info.type = tarfile.GNUTYPE_LONGNAME; info.size = n\n\
         with gzip.open(sys.argv[1], 'wb', compresslevel=6) as g:\n\
         \x20   g.write(info.tobuf(format=tarfile.USTAR_FORMAT))\n\
         \x20   chunk = b'a' * (1 << 24)\n\
         \x20   for _ in range(n // len(chunk)): g.write(chunk)\n\
         \x20   g.write(b'a' * (n % len(chunk)))\n",
        &[&long.display().to_string()],
    );
    let body = std::fs::read(&long).unwrap();
    assert!(body.len() < 4 << 20, "{}", body.len());
    let res = client.post(format!("{url}/api/archives")).header("content-type", "application/gzip").body(body);
    let res = res.send().await.unwrap();
    let text = res.text().await.unwrap();
    assert!(text.len() < 1000, "a refusal of {} bytes", text.len());
    assert!(text.contains("GNU long name of 1200000000 bytes"), "{text}");
    assert!(alive(&client, url).await, "the host died of a long name");

    // A pax path of 50,000 characters that leaves the folder: refused, the name cut short.
    let pax = d.join("pax.tar");
    python(
        "import sys, tarfile, io\n\
         with tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT) as t:\n\
         \x20   info = tarfile.TarInfo('../' + 'x' * 50_000); info.size = 4\n\
         \x20   t.addfile(info, io.BytesIO(b'WRP1'))\n",
        &[&pax.display().to_string()],
    );
    let (status, _, message) = post_bundle(&client, url, "application/x-tar", std::fs::read(&pax).unwrap()).await;
    assert!(status == 422 && message.contains("leaves the bundle's folder") && message.contains("..."), "{message}");
    assert!(message.len() < 600, "{} bytes", message.len());

    // A zip entry with an absolute path, as docs/API.md says.
    let zip = d.join("abs.zip");
    python(
        "import sys, zipfile\n\
         z = zipfile.ZipFile(sys.argv[1], 'w'); z.writestr(zipfile.ZipInfo('/abs/cap.wrp'), b'WRP1'); z.close()\n",
        &[&zip.display().to_string()],
    );
    let bytes = std::fs::read(&zip).unwrap();
    assert!(bytes.windows(12).any(|w| w == b"/abs/cap.wrp"), "the name stays absolute");
    let (status, _, message) = post_bundle(&client, url, "application/zip", bytes).await;
    assert!(status == 422 && message.contains("\"/abs/cap.wrp\" leaves the bundle's folder"), "{message}");

    // An expected state of 1.2 GB of zeros for a 4-byte region: its header says 4 bytes, and the
    // file is refused before its data is read.
    let npy = d.join("big.tar.gz");
    python(
        "import gzip, sys, tarfile\n\
         head = b\"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\"\n\
         head = head + b' ' * (117 - len(head)) + b'\\n'\n\
         npy = b'\\x93NUMPY\\x01\\x00' + len(head).to_bytes(2, 'little') + head\n\
         n = 1_200_000_000\n\
         wrp = open(sys.argv[2], 'rb').read()\n\
         with gzip.open(sys.argv[1], 'wb', compresslevel=6) as g:\n\
         \x20   info = tarfile.TarInfo('cap/x.wrp'); info.size = len(wrp)\n\
         \x20   g.write(info.tobuf(format=tarfile.USTAR_FORMAT)); g.write(wrp + b'\\0' * (-len(wrp) % 512))\n\
         \x20   info = tarfile.TarInfo('cap/expected/x.npy'); info.size = len(npy) + n\n\
         \x20   g.write(info.tobuf(format=tarfile.USTAR_FORMAT)); g.write(npy)\n\
         \x20   chunk = bytes(1 << 24)\n\
         \x20   for _ in range(n // len(chunk)): g.write(chunk)\n\
         \x20   g.write(bytes(n % len(chunk) + (-(len(npy) + n) % 512)))\n\
         \x20   g.write(bytes(1024))\n",
        &[&npy.display().to_string(), &{
            let small = d.join("x.wrp");
            std::fs::write(&small, wrp(&[("x".into(), 1)], &[(1, 4)], &[])).unwrap();
            small.display().to_string()
        }],
    );
    let (status, _, message) = post_bundle(&client, url, "application/gzip", std::fs::read(&npy).unwrap()).await;
    assert!(status == 422 && message.contains("needs 4 bytes of data but the file has 1200000000"), "{message}");
    assert!(alive(&client, url).await, "the host died of a large .npy");

    // `recap import-wrp` refuses the same fill with an error, under the same cap.
    let file = d.join("fill.wrp");
    std::fs::write(&file, terabyte_fill()).unwrap();
    let out = Command::new("prlimit")
        .arg(format!("--as={CAP}"))
        .arg("--")
        .arg(recap_bin())
        .arg("import-wrp")
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("a fill of 274877906944 values of 3 bytes"), "{stderr}");
    assert_eq!(archive_files(&data), 0, "nothing refused was stored");
}

fn archive_files(data: &Path) -> usize {
    std::fs::read_dir(data.join("blobs")).map(|d| d.count()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn region_downloads_stream_zeros_and_are_not_served_to_other_sites() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_capped(&dir.path().join("data"), &[], CAP);
    let client = reqwest::Client::new();
    let url = &server.url;
    for size in [1u64 << 62, 64 << 30] {
        let (status, a) = upload(&client, url, "huge", declared_region(size)).await;
        assert_eq!(status, 201, "{a}");
        let region = format!("{url}/api/archives/{}/regions/huge", a["id"].as_str().unwrap());
        let res = client.get(&region).header("sec-fetch-site", "same-origin").send().await.unwrap();
        assert_eq!(res.status().as_u16(), 200);
        let declared: u64 = res.headers()["content-length"].to_str().unwrap().parse().unwrap();
        // The .npy header, then the first 64 MiB of zeros; then the client leaves.
        let (mut head, mut got, mut stream) = (Vec::new(), 0u64, res.bytes_stream());
        while got < 64 << 20 {
            let chunk = stream.next().await.expect("more bytes").unwrap();
            let mut chunk = &chunk[..];
            // The header's first 10 bytes say how long the rest of it is; a chunk may end anywhere in it.
            while !chunk.is_empty() {
                let want = if head.len() < 10 { 10 } else { 10 + u16::from_le_bytes([head[8], head[9]]) as usize };
                if head.len() >= want {
                    break;
                }
                let n = (want - head.len()).min(chunk.len());
                head.extend(&chunk[..n]);
                chunk = &chunk[n..];
            }
            assert!(chunk.iter().all(|&b| b == 0));
            got += chunk.len() as u64;
        }
        assert!(String::from_utf8_lossy(&head).contains(&format!("'shape': ({size},)")), "{head:?}");
        assert_eq!(declared, head.len() as u64 + size, "the .npy header, then every byte of the region");
        drop(stream);
        assert!(alive(&client, url).await, "the host died of a download of {size} bytes");

        // Other sites' pages get nothing, told why.
        let res = client.get(&region).header("sec-fetch-site", "cross-site").send().await.unwrap();
        let (status, code, message) = error_of(res).await;
        assert_eq!((status, code.as_str()), (403, "foreign_origin"), "{message}");
        assert!(message.contains("region data") && message.contains("Sec-Fetch-Site: cross-site"), "{message}");
        let res = client.get(&region).header("origin", "http://evil.example").send().await.unwrap();
        assert_eq!(error_of(res).await.0, 403);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_while_converting_a_bundle_starts_again_and_clears_its_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    // A bundle upload whose body stops coming halfway: the host holds its scratch folder.
    let body = futures_util::stream::iter([Ok::<_, std::io::Error>(vec![0u8; 1 << 20])])
        .chain(futures_util::stream::pending());
    let request = reqwest::Client::new()
        .post(format!("{}/api/archives", server.url))
        .header("content-type", "application/x-tar")
        .body(reqwest::Body::wrap_stream(body));
    let pending = tokio::spawn(request.send());
    let tmp = data.join("tmp");
    let deadline = Instant::now() + Duration::from_secs(30);
    let scratch = loop {
        let found: Vec<PathBuf> = std::fs::read_dir(&tmp)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.join("upload").is_file()).collect())
            .unwrap_or_default();
        if let Some(p) = found.into_iter().next() {
            break p;
        }
        assert!(Instant::now() < deadline, "no scratch folder appeared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    server.kill9();
    let _ = pending.await;
    // Whatever else a crash may leave: an unpacked bundle's folders and a link out of them.
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, b"keep").unwrap();
    std::fs::create_dir_all(scratch.join("bundle/cap/expected")).unwrap();
    std::os::unix::fs::symlink(&outside, scratch.join("bundle/cap/link")).unwrap();
    std::os::unix::fs::symlink(&outside, tmp.join("stray-link")).unwrap();

    let server = Server::start(&data, &[]);
    assert!(alive(&reqwest::Client::new(), &server.url).await);
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(std::fs::read(&outside).unwrap(), b"keep", "a link is removed, not what it points to");
    let log = server.log_text();
    assert!(log.contains("removed a scratch folder a previous run left unfinished"), "{log}");
}

#[test]
fn importing_many_bindings_or_regions_takes_time_in_proportion() {
    let dir = tempfile::tempdir().unwrap();
    let import = |name: &str, capture: Vec<u8>, args: &[&str]| {
        let file = dir.path().join(format!("{name}.wrp"));
        std::fs::write(&file, capture).unwrap();
        let started = Instant::now();
        let out = Command::new(recap_bin()).arg("import-wrp").arg(&file).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        started.elapsed()
    };
    // Each was minutes of lookups by scan; by key they take well under a second each.
    let bindings: Vec<(String, u32)> = (0..160_000).map(|i| (format!("b{i}"), 1)).collect();
    let took = import("bindings", wrp(&bindings, &[(1, 4)], &[]), &[]);
    assert!(took < Duration::from_secs(60), "160,000 bindings took {took:?}");
    let regions: Vec<(u32, u64)> = (1..=300_000).map(|id| (id, 4)).collect();
    let took = import("regions", wrp(&[], &regions, &[]), &["--max-regions", "300000"]);
    assert!(took < Duration::from_secs(60), "300,000 regions took {took:?}");
    // Over the limit on regions, the import says which limit and how to raise it.
    let file = dir.path().join("regions.wrp");
    let out = Command::new(recap_bin()).arg("import-wrp").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("300000") && stderr.contains("--max-regions"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_link_with_the_control_key_cancels_over_rest_as_over_its_websocket() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--token", "s3cret-token"]);
    let client = reqwest::Client::new();
    let url = &server.url;
    let res = client
        .post(format!("{url}/api/archives?name=spin"))
        .bearer_auth("s3cret-token")
        .header("content-type", "application/octet-stream")
        .body(spin_archive());
    let a: Value = res.send().await.unwrap().json().await.unwrap();
    let res = client
        .post(format!("{url}/api/sessions"))
        .bearer_auth("s3cret-token")
        .json(&serde_json::json!({"archive": a["id"]}));
    let created: Value = res.send().await.unwrap().json().await.unwrap();
    let id = created["id"].as_str().unwrap();
    let view = created["url"].as_str().unwrap().split("token=").nth(1).unwrap().to_string();
    let cancel = format!("{url}/api/sessions/{id}/cancel?token={view}");

    // The view-only token with a wrong key: the key is what is refused.
    let res = client.post(&cancel).header("x-recap-control", "0".repeat(32)).send().await.unwrap();
    assert_eq!(error_of(res).await.1, "forbidden");
    // With the session's key it cancels.
    let res = client.post(&cancel).header("x-recap-control", created["control"].as_str().unwrap()).send().await;
    assert_eq!(res.unwrap().status().as_u16(), 200);
    let stream = collect_stream(&server.ws(&format!("/api/sessions/{id}/ws?token={view}"))).await;
    assert_eq!(stream.last().unwrap()["type"], "cancelled", "{stream:?}");
    // Everything else that changes state stays closed to it.
    let res = client.delete(format!("{url}/api/archives/{}?token={view}", a["id"].as_str().unwrap())).send().await;
    assert_eq!(error_of(res.unwrap()).await.1, "view_only");
}
