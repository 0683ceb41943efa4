//! The mail pipeline's functions (`examples/mail/job.conf`): each step of the workflow `mail`
//! is one of them, and takes its predecessor's result as `inputs.<step>`. Shared by the
//! example node (`main.rs`) and the tests that run the pipeline (`tests/it/workflows.rs`).
//!
//! A mail is a small RFC 5322 text: headers, a blank line, a body. What the steps keep goes
//! under `<data dir>/mail/`: the stored copy and its two parts, and `index.txt` (one line per
//! link found).

use std::path::{Path, PathBuf};

use jobvisor::executor::FnContext;
use jobvisor::runtime::EngineBuilder;
use serde_json::{Value as Json, json};

/// Registers every step's function.
pub fn register(builder: EngineBuilder) -> EngineBuilder {
    builder
        .function("mail.store", store)
        .function("mail.split", split)
        .function("mail.links", links)
        .function("mail.strip", strip)
        .function("mail.index", index)
        .function("mail.headers", headers)
        .function("mail.geolocate", geolocate)
}

fn folder(ctx: &FnContext) -> Result<PathBuf, String> {
    let dir = ctx.env.data_dir.join("mail");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

fn text_of(input: &Json, pointer: &str) -> Result<String, String> {
    input
        .pointer(pointer)
        .and_then(Json::as_str)
        .map(String::from)
        .ok_or_else(|| format!("input {pointer} is missing"))
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
}

fn write(path: &Path, text: &str) -> Result<String, String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path.display().to_string())
}

/// Keeps a copy of the mail (`path`, the workflow's parameter) under the run's id.
pub fn store(ctx: &FnContext, input: Json) -> Result<Json, String> {
    let path = text_of(&input, "/path")?;
    let text = read(&path)?;
    let stored = folder(ctx)?.join(format!("{}.eml", ctx.run_id));
    Ok(json!({ "stored": write(&stored, &text)?, "bytes": text.len() }))
}

/// Splits the stored mail into its headers and its body, at the first blank line.
pub fn split(_: &FnContext, input: Json) -> Result<Json, String> {
    let stored = text_of(&input, "/inputs/store/stored")?;
    let text = read(&stored)?.replace("\r\n", "\n");
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    Ok(json!({
        "headers": write(Path::new(&format!("{stored}.headers")), head)?,
        "body": write(Path::new(&format!("{stored}.body")), body)?,
    }))
}

/// The links in the body (`http://` and `https://` words).
pub fn links(_: &FnContext, input: Json) -> Result<Json, String> {
    let body = read(&text_of(&input, "/inputs/split/body")?)?;
    let found: Vec<String> = body
        .split(|c: char| c.is_whitespace() || matches!(c, '<' | '>' | '"' | '(' | ')'))
        .filter(|w| w.starts_with("http://") || w.starts_with("https://"))
        .map(|w| w.trim_end_matches(['.', ',', ';']).to_string())
        .collect();
    Ok(json!({ "links": found }))
}

/// The links without their tracking: no query, no fragment, each once.
pub fn strip(_: &FnContext, input: Json) -> Result<Json, String> {
    let links = input
        .pointer("/inputs/links/links")
        .and_then(Json::as_array)
        .ok_or("input /inputs/links/links is missing")?;
    let mut clean: Vec<String> = links
        .iter()
        .filter_map(Json::as_str)
        .map(|l| l.split(['?', '#']).next().unwrap_or(l).to_string())
        .collect();
    clean.sort();
    clean.dedup();
    Ok(json!({ "links": clean }))
}

/// Appends the links to the index, one line each: the workflow's mail and the link.
pub fn index(ctx: &FnContext, input: Json) -> Result<Json, String> {
    use std::io::Write as _;
    let links = input
        .pointer("/inputs/strip/links")
        .and_then(Json::as_array)
        .ok_or("input /inputs/strip/links is missing")?;
    let mail = text_of(&input, "/path")?;
    let mut lines = String::new();
    for link in links.iter().filter_map(Json::as_str) {
        lines.push_str(&format!("{mail} {link}\n"));
    }
    let path = folder(ctx)?.join("index.txt");
    // One write of whole lines with O_APPEND: runs beside each other never interleave a line.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(lines.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(json!({ "indexed": links.len() }))
}

/// The sender, the subject and the addresses the mail came through (`Received: … [a.b.c.d]`).
pub fn headers(_: &FnContext, input: Json) -> Result<Json, String> {
    let head = read(&text_of(&input, "/inputs/split/headers")?)?;
    let field = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    let ips: Vec<String> = head
        .lines()
        .filter(|l| l.starts_with("Received:"))
        .filter_map(|l| {
            let start = l.find('[')?;
            let end = l[start..].find(']')?;
            Some(l[start + 1..start + end].to_string())
        })
        .collect();
    Ok(json!({ "from": field("From:"), "subject": field("Subject:"), "ips": ips }))
}

/// Where each address is, from a small built-in table: private, loopback, documentation
/// ranges, otherwise the region its first octet was assigned to.
pub fn geolocate(_: &FnContext, input: Json) -> Result<Json, String> {
    let ips = input
        .pointer("/inputs/headers/ips")
        .and_then(Json::as_array)
        .ok_or("input /inputs/headers/ips is missing")?;
    let located: Vec<Json> = ips
        .iter()
        .filter_map(Json::as_str)
        .map(|ip| json!({ "ip": ip, "where": region(ip) }))
        .collect();
    Ok(json!({ "located": located }))
}

fn region(ip: &str) -> &'static str {
    let octets: Vec<u8> = ip.split('.').filter_map(|o| o.parse().ok()).collect();
    match octets.as_slice() {
        [10, ..] | [192, 168, ..] => "private",
        [172, b, ..] if (16..32).contains(b) => "private",
        [127, ..] => "loopback",
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => "documentation",
        [a, _, _, _] if *a < 64 => "region A",
        [a, _, _, _] if *a < 128 => "region B",
        [_, _, _, _] => "region C",
        _ => "unknown",
    }
}

/// A mail for tests and the example: `n` picks its sender, relay and links.
pub fn sample(n: usize) -> String {
    format!(
        "From: sender{n}@example.org\nSubject: note {n}\n\
         Received: from relay{n} ([192.0.2.{}]) by mx\nReceived: from edge ([10.0.0.{}])\n\n\
         Hello {n}, see https://example.org/a/{n}?utm_source=mail and\n\
         http://example.net/b#{n} or https://example.org/a/{n}.\n",
        n % 250,
        n % 250
    )
}
