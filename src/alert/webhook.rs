//! The webhook sink: POSTs each event as JSON, with a `text` field so Slack and Mattermost
//! incoming webhooks show it as a message.
//!
//! Body: `{"text": "<one line>", "event": "opened", "finding": {...}, "at": <unix>}`. The
//! `text` is escaped by Slack's rule (`&`, `<`, `>`; control characters shown escaped), so a
//! process named `<!channel>` pings nobody on Slack; `finding` keeps the raw texts. Mattermost
//! also reads plain `@channel`/`@here` and markdown, which this does not neutralise. A
//! transport error, a timeout or a non-2xx status is a failed attempt; failed attempts are
//! retried with exponential backoff (1 s, 2 s, 4 s, … by default).

use std::thread;
use std::time::Duration;

use super::sink::{Sink, event_json, event_line};
use crate::detect::FindingEvent;
use crate::text::{clean, for_markup};

/// How much of an error response's body an error message keeps.
const BODY_KEEP: u64 = 200;

/// POSTs events to one URL.
pub struct WebhookSink {
    url: String,
    agent: ureq::Agent,
    retries: u32,
    backoff: Duration,
    host: String,
}

impl WebhookSink {
    /// The first pause before a retry; each next one doubles.
    pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);

    /// Checks the URL (`http://` or `https://` with a host). `timeout` bounds each attempt
    /// as a whole (connect, send, response); `retries` is the number of attempts after the
    /// first.
    pub fn new(url: &str, timeout: Duration, retries: u32) -> Result<Self, String> {
        check_url(url)?;
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .user_agent(concat!("gpuwatch/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Ok(Self {
            url: url.to_owned(),
            agent,
            retries,
            backoff: Self::DEFAULT_BACKOFF,
            host: crate::hostname(),
        })
    }

    /// Sets the first pause before a retry (tests use milliseconds).
    #[must_use]
    pub fn with_backoff(mut self, first: Duration) -> Self {
        self.backoff = first;
        self
    }

    /// The message body for `event`.
    fn body(&self, event: &FindingEvent) -> String {
        let line = event_line(event);
        let text = if self.host.is_empty() {
            format!("gpuwatch: {line}")
        } else {
            format!("gpuwatch on {}: {line}", clean(&self.host))
        };
        let mut body = event_json(event);
        if let Some(map) = body.as_object_mut() {
            map.insert("text".into(), for_markup(&text).into());
        }
        body.to_string()
    }

    fn attempt(&self, body: &str) -> Result<(), String> {
        let mut response = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .send(body)
            .map_err(|e| format!("webhook: POST {}: {e}", self.url))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response
            .body_mut()
            .with_config()
            .limit(BODY_KEEP)
            .read_to_string()
            .unwrap_or_default();
        let text = text.trim();
        if text.is_empty() {
            Err(format!("webhook: POST {}: status {status}", self.url))
        } else {
            Err(format!(
                "webhook: POST {}: status {status}: {text}",
                self.url
            ))
        }
    }
}

/// A URL ureq can POST to: `http` or `https`, with a host.
fn check_url(url: &str) -> Result<(), String> {
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|e| format!("invalid URL {url:?}: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(format!("invalid URL {url:?}: expected http:// or https://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("invalid URL {url:?}: no host"));
    }
    Ok(())
}

impl Sink for WebhookSink {
    fn name(&self) -> &'static str {
        "webhook"
    }

    fn deliver(&mut self, event: &FindingEvent) -> Result<(), String> {
        let body = self.body(event);
        let mut pause = self.backoff;
        let mut attempt = 0;
        loop {
            match self.attempt(&body) {
                Ok(()) => return Ok(()),
                Err(e) if attempt >= self.retries => {
                    return Err(if attempt == 0 {
                        e
                    } else {
                        format!("{e} (after {} attempts)", attempt + 1)
                    });
                }
                Err(_) => {
                    thread::sleep(pause);
                    pause = pause.saturating_mul(2);
                    attempt += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_escaped_for_slack_and_the_fields_stay_raw() {
        use crate::alert::test_support::{event, finding};
        use crate::detect::{RuleKind, Severity};
        let mut sink =
            WebhookSink::new("http://127.0.0.1:9/hook", Duration::from_secs(1), 0).unwrap();
        sink.host = "node<1>".into();
        let mut f = finding(
            RuleKind::FillingUp,
            "GPU-a",
            Some(0),
            Severity::Critical,
            0.0,
        );
        f.summary = "pid 7 (<!channel> & <@U123>\nforged)".into();
        let body: serde_json::Value =
            serde_json::from_str(&sink.body(&event("opened", f))).unwrap();
        assert_eq!(
            body["text"],
            "gpuwatch on node&lt;1&gt;: [critical] filling-up opened on GPU 0: \
             pid 7 (&lt;!channel&gt; &amp; &lt;@U123&gt;\\nforged)"
        );
        assert_eq!(
            body["finding"]["summary"],
            "pid 7 (<!channel> & <@U123>\nforged)"
        );
    }

    #[test]
    fn urls_are_checked() {
        assert!(check_url("https://hooks.slack.com/services/T/B/X").is_ok());
        assert!(check_url("http://127.0.0.1:8080/hook").is_ok());
        for bad in [
            "",
            "hooks.slack.com/x",
            "ftp://host/x",
            "http://",
            "not a url",
        ] {
            let err = check_url(bad).unwrap_err();
            assert!(err.contains("invalid URL"), "{bad}: {err}");
        }
    }
}
