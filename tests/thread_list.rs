//! `uwf thread list` for people and programs (`docs/cli.md#paging-through-threads`): newest first,
//! `--limit`, `--before` (keyset paging), `--since`, `--status`, `--workflow`; a terminal table
//! shows the newest 50 and says how many more there are; JSON lines list everything; `--search`
//! finds threads by prompt, id or workflow, in an index of any version.

mod common;

use common::{Env, json, put_example, start_thread};

fn ids(env: &Env, args: &[&str]) -> Vec<String> {
    let mut all = vec!["thread", "list", "--json"];
    all.extend_from_slice(args);
    env.ok(&all)
        .lines()
        .map(|l| json(l)["thread"].as_str().expect("thread").to_owned())
        .collect()
}

#[test]
fn lists_page_newest_first_and_filter() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let started: Vec<String> = (0..60)
        .map(|i| start_thread(&env, "solve-issue", &format!("task {i}")))
        .collect();
    for id in &started[..6] {
        env.ok(&["thread", "kill", id]);
    }
    env.ok(&["thread", "step", &started[59], "--agent", "dry"]);

    // Newest first: the reverse of the order they were started in (ULIDs sort by time).
    let active = ids(&env, &[]);
    let mut newest_first: Vec<String> = started[6..].to_vec();
    newest_first.reverse();
    assert_eq!(active, newest_first);
    assert_eq!(ids(&env, &["--all"]).len(), 60);

    // Pages: --limit, then --before the last id of a page gives the next, with no gaps.
    let mut paged = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut args = vec!["--all", "--limit", "7"];
        if let Some(b) = &before {
            args.extend(["--before", b.as_str()]);
        }
        let page = ids(&env, &args);
        assert!(page.len() <= 7);
        if page.is_empty() {
            break;
        }
        before = page.last().cloned();
        paged.extend(page);
    }
    assert_eq!(paged, ids(&env, &["--all"]));

    // Status: from the index (killed are archived; done and killed imply --all).
    assert_eq!(ids(&env, &["--status", "killed"]).len(), 6);
    assert_eq!(ids(&env, &["--status", "active"]).len(), 54);
    let row = env.ok(&["thread", "list", "--json", "--limit", "1"]);
    let row = json(&row);
    assert_eq!(row["thread"], started[59].as_str());
    assert_eq!(row["steps"], 1, "{row}");
    assert_eq!(row["next"], "developer", "{row}");
    assert!(row["updatedAt"].as_u64().is_some(), "{row}");
    let err = env.fails(&["thread", "list", "--status", "sleeping"], 2);
    assert!(err.contains("possible values"), "{err}");

    // Since: a duration ago or a time.
    assert_eq!(ids(&env, &["--since", "1h"]).len(), 54);
    assert!(ids(&env, &["--all", "--since", "2999-01-01T00:00:00Z"]).is_empty());
    let err = env.fails(&["thread", "list", "--since", "last tuesday"], 2);
    assert!(err.contains("neither a duration"), "{err}");

    // Workflow: by name.
    assert_eq!(ids(&env, &["--workflow", "solve-issue"]).len(), 54);
    assert!(ids(&env, &["--workflow", "nothing-like-it"]).is_empty());

    // Ids only.
    let quiet = env.ok(&["thread", "list", "-q", "--limit", "2"]);
    assert_eq!(quiet.lines().collect::<Vec<_>>(), &newest_first[..2]);
}

#[test]
fn a_terminal_table_shows_the_newest_fifty_and_how_many_more() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let started: Vec<String> = (0..53)
        .map(|i| start_thread(&env, "solve-issue", &format!("task {i}")))
        .collect();
    // `script` gives the command a terminal, as a person's shell would.
    let uwf = assert_cmd::cargo::cargo_bin("uwf");
    let out = std::process::Command::new("script")
        .args([
            "-qec",
            &format!("{} thread list", uwf.display()),
            "/dev/null",
        ])
        .env("UWF_STORAGE_ROOT", env.root())
        .env("HOME", env.dir.path())
        .env("NO_COLOR", "1")
        .env("COLUMNS", "200")
        .output();
    let Ok(out) = out else {
        eprintln!("SKIP a_terminal_table_shows_the_newest_fifty_and_how_many_more: no `script`");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(out.status.success(), "{text}");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| started.iter().any(|id| l.starts_with(id.as_str())))
        .collect();
    assert_eq!(rows.len(), 50, "{text}");
    assert!(
        rows[0].starts_with(started[52].as_str()),
        "newest first: {text}"
    );
    assert!(text.contains("THREAD"), "{text}");
    let more = format!(
        "… and 3 more (--limit N shows more; --before {}",
        &started[3]
    );
    assert!(text.contains(&more), "{text}");
}

/// An index written before it kept prompts (its second version, without the `prompt` column)
/// is upgraded on first use, and the first search fills every row from its start node.
#[test]
fn search_finds_threads_of_an_index_made_before_it_kept_prompts() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let stepped = start_thread(&env, "solve-issue", "Migrate the Billing service");
    env.ok(&["thread", "step", &stepped, "--agent", "dry"]);
    let killed = start_thread(&env, "solve-issue", "billing: 100% of invoices");
    env.ok(&["thread", "kill", &killed]);
    let other = start_thread(&env, "solve-issue", "something else");
    let db = env.root().join("index.db");
    {
        let conn = rusqlite::Connection::open(&db).expect("open index");
        conn.execute_batch(
            "drop index threads_unsearchable;
             alter table threads drop column prompt;
             alter table threads drop column spent;
             update meta set value = 2 where key = 'schema';",
        )
        .expect("back to the second version");
    }
    assert_eq!(
        ids(&env, &["--all", "--search", "BILLING"]),
        [killed.clone(), stepped.clone()]
    );
    let conn = rusqlite::Connection::open(&db).expect("open index");
    let (version, unfilled): (i64, i64) = conn
        .query_row(
            "select (select value from meta where key = 'schema'), \
                    (select count(*) from threads where prompt is null)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("read index");
    assert_eq!((version, unfilled), (4, 0));
    // With the other filters, and `%` as a character.
    assert_eq!(ids(&env, &["--search", "billing"]), [stepped.as_str()]);
    assert_eq!(
        ids(&env, &["--status", "killed", "--search", "billing"]),
        [killed.as_str()]
    );
    assert_eq!(ids(&env, &["--all", "--search", "100%"]), [killed]);
    assert!(ids(&env, &["--all", "--search", "100%_"]).is_empty());
    assert_eq!(ids(&env, &["--search", &other.to_lowercase()]), [other]);
    assert_eq!(ids(&env, &["--all", "--search", "solve-iss"]).len(), 3);
}
