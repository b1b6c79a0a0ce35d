//! Alertmanager's API v2 as a target: `POST <base>/api/v2/alerts` with a JSON array of
//! `postableAlert`s (`labels`, `annotations`, `startsAt`, `endsAt`, `generatorURL`). Alertmanager
//! deduplicates by label set, so an event sent twice (a retry, two collectors) is one alert; every
//! URL of an HA pair gets every alert (they gossip notifications, not alerts).

use std::sync::Arc;

use http::Uri;

use super::document::{OomAlert, PostableAlert};

/// Alerts per request.
pub const BATCH: usize = 64;

/// The API path under an Alertmanager's base URL.
pub const ALERTS_PATH: &str = "/api/v2/alerts";

/// `POST` endpoint of the Alertmanager at `base` (`http://am:9093`, `http://host/prefix`; a URL
/// that already ends in `/api/v2/alerts` is kept).
pub fn endpoint(base: &Uri) -> Result<Uri, http::Error> {
    let path = base.path().trim_end_matches('/');
    let path = if path.ends_with(ALERTS_PATH) { path.to_owned() } else { format!("{path}{ALERTS_PATH}") };
    let mut parts = base.clone().into_parts();
    parts.path_and_query = Some(path.parse()?);
    Ok(Uri::from_parts(parts)?)
}

/// The request body for `alerts`.
pub fn body(alerts: &[Arc<OomAlert>]) -> Result<Vec<u8>, serde_json::Error> {
    let postable: Vec<PostableAlert<'_>> = alerts.iter().map(|a| a.postable()).collect();
    serde_json::to_vec(&postable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::config::AlertsSection;
    use crate::alert::document::AlertBuilder;
    use crate::alert::document::tests::event;

    #[test]
    fn endpoints_keep_prefixes() {
        let e = |s: &str| endpoint(&s.parse().unwrap()).unwrap().to_string();
        assert_eq!(e("http://am:9093"), "http://am:9093/api/v2/alerts");
        assert_eq!(e("http://am:9093/"), "http://am:9093/api/v2/alerts");
        assert_eq!(e("https://h/alertmanager/"), "https://h/alertmanager/api/v2/alerts");
        assert_eq!(e("http://am:9093/api/v2/alerts"), "http://am:9093/api/v2/alerts");
    }

    #[test]
    fn the_body_is_an_array_of_postable_alerts() {
        let b = AlertBuilder::new(&AlertsSection::default()).unwrap();
        let alerts = vec![Arc::new(b.build(event(1), None, 0, 0)), Arc::new(b.build(event(2), None, 0, 0))];
        let v: serde_json::Value = serde_json::from_slice(&body(&alerts).unwrap()).unwrap();
        let arr = v.as_array().unwrap();
        assert_eq!(arr.len(), 2);
        for a in arr {
            let mut keys: Vec<&str> = a.as_object().unwrap().keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(keys, ["annotations", "endsAt", "labels", "startsAt"], "{a}");
        }
        assert_eq!(arr[1]["labels"]["event_id"], "2");
    }
}
