//! The two templates of `[alerts]`: `postmortem_command` (a shell command) and `generator_url`
//! (a URL). `{name}` is replaced by a value of the event ([`Var`]); values are shell-quoted where
//! needed in a command and percent-encoded in a URL, so an odd node or pod name can neither break
//! the command nor the link. `{{` and `}}` are literal braces; any other `{` is an error found
//! when the configuration is checked.

use std::fmt::Write as _;

/// A value of the event a template may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// The event id (decimal).
    EventId,
    /// Cluster.
    Cluster,
    /// Node.
    Node,
    /// GPU index ('' for a host OOM).
    Gpu,
    /// Attributed scenario.
    Scenario,
    /// Kubernetes namespace ('' when unknown).
    Namespace,
    /// Pod ('' when unknown).
    Pod,
    /// Job ('' when unknown).
    Job,
    /// Failure time, epoch ms.
    TsMs,
    /// Failure time, RFC 3339.
    Time,
    /// Ten minutes before the failure, epoch ms (a dashboard's `from`).
    FromMs,
    /// Five minutes after the failure, epoch ms (a dashboard's `to`).
    ToMs,
}

impl Var {
    /// Every variable with its placeholder name.
    pub const ALL: [(&'static str, Var); 12] = [
        ("event_id", Var::EventId),
        ("cluster", Var::Cluster),
        ("node", Var::Node),
        ("gpu", Var::Gpu),
        ("scenario", Var::Scenario),
        ("namespace", Var::Namespace),
        ("pod", Var::Pod),
        ("job", Var::Job),
        ("ts_ms", Var::TsMs),
        ("time", Var::Time),
        ("from_ms", Var::FromMs),
        ("to_ms", Var::ToMs),
    ];
}

/// Where a rendered template goes: how its values are escaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateUse {
    /// A shell command: values quoted with `'…'` unless they are plain words.
    Shell,
    /// A URL: values percent-encoded (RFC 3986 unreserved characters kept).
    Url,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(Var),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
    usage: TemplateUse,
}

impl Template {
    /// Parses `text`; errors name `key`, the offending placeholder and the ones that exist.
    pub fn parse(key: &str, text: &str, usage: TemplateUse) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(i) = rest.find(['{', '}']) {
            literal.push_str(&rest[..i]);
            let tail = &rest[i..];
            if let Some(after) = tail.strip_prefix("{{") {
                literal.push('{');
                rest = after;
            } else if let Some(after) = tail.strip_prefix("}}") {
                literal.push('}');
                rest = after;
            } else if let Some(after) = tail.strip_prefix('{') {
                let Some(end) = after.find('}') else {
                    return Err(format!("{key}: unclosed '{{' in {text:?}"));
                };
                let name = &after[..end];
                let Some((_, var)) = Var::ALL.iter().find(|(n, _)| *n == name) else {
                    let known: Vec<&str> = Var::ALL.iter().map(|(n, _)| *n).collect();
                    return Err(format!(
                        "{key}: unknown placeholder {{{name}}} (known: {}; '{{{{' for a literal brace)",
                        known.join(", ")
                    ));
                };
                if !literal.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut literal)));
                }
                parts.push(Part::Var(*var));
                rest = &after[end + 1..];
            } else {
                return Err(format!("{key}: single '}}' in {text:?} (write '}}}}' for a literal brace)"));
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Template { parts, usage })
    }

    /// Whether the template renders nothing.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The template with each placeholder replaced by `value(var)`, escaped for its use.
    pub fn render(&self, value: impl Fn(Var) -> String) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Var(v) => {
                    let raw = value(*v);
                    match self.usage {
                        TemplateUse::Shell => out.push_str(&shell_quote(&raw)),
                        TemplateUse::Url => percent_encode(&raw, &mut out),
                    }
                }
            }
        }
        out
    }
}

/// `s` as one shell word: unchanged when it holds only `[A-Za-z0-9._:/@%+=,-]` (and is not
/// empty), else in single quotes (a `'` inside as `'\''`).
pub fn shell_quote(s: &str) -> String {
    let plain = |c: char| {
        c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '@' | '%' | '+' | '=' | ',' | '-')
    };
    if !s.is_empty() && s.chars().all(plain) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn percent_encode(s: &str, out: &mut String) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(v: Var) -> String {
        match v {
            Var::EventId => "42".into(),
            Var::Cluster => "prod a".into(),
            Var::Node => "gpu-node-7".into(),
            Var::Pod => "it's".into(),
            Var::FromMs => "1000".into(),
            _ => String::new(),
        }
    }

    #[test]
    fn commands_quote_what_the_shell_would_split() {
        let t = Template::parse(
            "k",
            "oomlens postmortem {event_id} --cluster-name {cluster} --node {node}",
            TemplateUse::Shell,
        )
        .unwrap();
        assert_eq!(t.render(values), "oomlens postmortem 42 --cluster-name 'prod a' --node gpu-node-7");
        let t = Template::parse("k", "x {pod} {gpu}", TemplateUse::Shell).unwrap();
        assert_eq!(t.render(values), "x 'it'\\''s' ''");
    }

    #[test]
    fn urls_percent_encode_values_and_keep_literal_braces() {
        let t =
            Template::parse("k", "https://g/d?c={cluster}&from={from_ms}&x={{y}}", TemplateUse::Url).unwrap();
        assert_eq!(t.render(values), "https://g/d?c=prod%20a&from=1000&x={y}");
        assert!(Template::parse("k", "", TemplateUse::Url).unwrap().is_empty());
    }

    #[test]
    fn unknown_and_unclosed_placeholders_are_errors() {
        let err = Template::parse("alerts.x", "a {nope} b", TemplateUse::Url).unwrap_err();
        assert!(err.contains("alerts.x") && err.contains("{nope}") && err.contains("event_id"), "{err}");
        assert!(Template::parse("k", "a {node", TemplateUse::Url).unwrap_err().contains("unclosed"));
        assert!(Template::parse("k", "a } b", TemplateUse::Url).unwrap_err().contains("single"));
    }
}
