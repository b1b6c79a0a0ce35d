#!/usr/bin/env python3
"""How much could any classifier get out of what a message carries? A check of the rules.

The attribution rules were written by hand from the labelled corpus. This script asks whether
they leave signal on the table: it trains general-purpose classifiers on the same evidence and
scores them by 5-fold cross-validation (each record predicted by a model that never saw it, so
the figures are out of sample, unlike the rules' in-sample score), next to the rules' own verdicts:

* the numbers the features carry (request, capacity, free, allocated, reserved, process total,
  other processes, memory outside the allocator, their ratios to capacity) with the framework,
  the phase and the parser's hint — a random forest and gradient boosting;
* the message's words (TF-IDF over identifiers and words) — logistic regression;
* the words plus the rules' verdict.

Input: the per-record report of the attribution test and the corpus's messages:

    OOMLENS_CORPUS_REPORT=/tmp/report.tsv \\
        cargo test -p oomlens-collector --test attribution_corpus
    python3 corpus/tools/headroom.py /tmp/report.tsv

Needs scikit-learn (`pip install scikit-learn`); not part of the test suite. Seeded: the same
report gives the same figures. The figures and what they mean are in docs/attribution.md.
"""

import math
import re
import sys
from pathlib import Path

try:
    import numpy as np
    from scipy.sparse import csr_matrix, hstack
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, balanced_accuracy_score
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
except ImportError as e:  # pragma: no cover - a tool, not a test
    sys.exit(f"headroom.py needs scikit-learn (pip install scikit-learn): {e}")

MESSAGES = Path(__file__).resolve().parent.parent / "messages"
SEED = 0
FOLDS = 5


def number(s):
    try:
        return float(s)
    except ValueError:
        return math.nan


def ratio(a, b):
    return a / b if not (math.isnan(a) or math.isnan(b) or b == 0) else math.nan


def read_report(path):
    """One row per labelled record: id, label, the rules' verdict, the evidence field string."""
    rows = []
    for line in Path(path).read_text().splitlines():
        cols = line.split("\t")
        if len(cols) < 8:
            sys.exit(f"{path}: not the attribution test's report (a line with {len(cols)} columns)")
        rows.append({"id": cols[1], "label": cols[2], "verdict": cols[3], "evidence": cols[7]})
    if not rows:
        sys.exit(f"{path}: empty report")
    return rows


def evidence(field):
    """The report's `key=value` evidence: numbers in GiB, the framework, phase and hint."""
    kv = dict(m.split("=", 1) for m in re.findall(r"(\w+=\S*)", field))
    q, c, f, a, r, p = (number(kv.get(k, "-")) for k in "QCFARP")
    others = re.match(r"([\d.]+)", kv.get("others", "-"))
    o = number(others.group(1)) if others else math.nan
    out = number(kv.get("out", "-"))
    numbers = [q, c, f, a, r, p, o, out, ratio(q, c), ratio(a, c), ratio(r - a, c), ratio(out, c)]
    return numbers, kv.get("fw", ""), kv.get("phase", "/").split("/")[0], kv.get("hint", "")


def numeric_matrix(rows):
    parsed = [evidence(r["evidence"]) for r in rows]
    cats = [sorted({p[i] for p in parsed}) for i in (1, 2, 3)]
    matrix = []
    for numbers, *names in parsed:
        v = [-1.0 if math.isnan(x) else x for x in numbers]
        v += [float(math.isnan(numbers[1]))]
        for name, values in zip(names, cats):
            v += [float(name == x) for x in values]
        matrix.append(v)
    return np.array(matrix)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = read_report(sys.argv[1])
    y = np.array([r["label"] for r in rows])
    verdicts = [r["verdict"] for r in rows]
    folds = StratifiedKFold(FOLDS, shuffle=True, random_state=SEED)

    def score(name, predicted):
        print(f"{name:<44} accuracy {accuracy_score(y, predicted):6.1%}   macro {balanced_accuracy_score(y, predicted):6.1%}")

    print(f"{len(rows)} labelled records, {FOLDS}-fold cross-validation (seed {SEED})")
    score("rules (in sample)", verdicts)
    numeric = numeric_matrix(rows)
    for name, model in [
        ("numbers: random forest", RandomForestClassifier(300, min_samples_leaf=3, class_weight="balanced", random_state=SEED)),
        ("numbers: gradient boosting", GradientBoostingClassifier(random_state=SEED)),
    ]:
        score(name, cross_val_predict(model, numeric, y, cv=folds))
    texts = []
    for r in rows:
        path = MESSAGES / f"{r['id']}.log"
        try:
            texts.append(path.read_text(errors="replace"))
        except OSError as e:
            sys.exit(f"{path}: {e}")
    words = TfidfVectorizer(token_pattern=r"[A-Za-z_][A-Za-z_0-9]+", min_df=3, sublinear_tf=True).fit_transform(texts)
    words_model = LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced")
    score("words: logistic regression", cross_val_predict(words_model, words, y, cv=folds))
    labels = sorted(set(y) | set(verdicts))
    verdict_columns = csr_matrix(np.array([[3.0 * (v == x) for x in labels] for v in verdicts]))
    both = hstack([words, verdict_columns]).tocsr()
    score("words + the rules' verdict", cross_val_predict(words_model, both, y, cv=folds))


if __name__ == "__main__":
    main()
