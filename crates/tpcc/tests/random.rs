//! The generator's specification helpers against the specification's examples and rules.

use tpcc::random::{last_name, nurand_combine, NuRandConstants, TpccRng, SYLLABLES};

#[test]
fn last_names_follow_the_syllables() {
    assert_eq!(SYLLABLES.len(), 10);
    assert_eq!(last_name(371), "PRICALLYOUGHT");
    assert_eq!(last_name(0), "BARBARBAR");
    assert_eq!(last_name(999), "EINGEINGEING");
    assert_eq!(last_name(40), "BARPRESBAR");
    // Out-of-range numbers use their last three digits instead of panicking.
    assert_eq!(last_name(1371), "PRICALLYOUGHT");
    assert_eq!(last_name(-1), "EINGEINGEING");
}

#[test]
fn nurand_follows_the_formula() {
    // (((A_part | xy_part) + C) % (y - x + 1)) + x
    assert_eq!(nurand_combine(0b1010, 0b0101, 255, 0, 0, 999), 15);
    assert_eq!(
        nurand_combine(200, 900, 255, 123, 0, 999),
        ((200 | 900) + 123) % 1000
    );
    assert_eq!(
        nurand_combine(1023, 3000, 1023, 7, 1, 3000),
        ((1023 | 3000) + 7) % 3000 + 1
    );
    assert_eq!(
        nurand_combine(5, 5, 255, 0, 10, 9),
        10,
        "an empty range gives x"
    );
}

#[test]
fn nurand_stays_in_range_and_is_skewed() {
    let mut rng = TpccRng::new(3);
    let mut hits = vec![0u32; 1000];
    for _ in 0..200_000 {
        let v = rng.nurand(255, 0, 999, 117);
        assert!((0..=999).contains(&v));
        hits[v as usize] += 1;
    }
    let max = *hits.iter().max().unwrap();
    let min = *hits.iter().min().unwrap();
    assert!(
        max > 4 * (min + 1),
        "NURand should be non-uniform: {min}..{max}"
    );
}

#[test]
fn strings_have_the_requested_shape() {
    let mut rng = TpccRng::new(5);
    for _ in 0..1000 {
        let a = rng.a_string(8, 16);
        assert!((8..=16).contains(&a.len()));
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric()));
        let n = rng.n_string(16, 16);
        assert_eq!(n.len(), 16);
        assert!(n.bytes().all(|b| b.is_ascii_digit()));
        let zip = rng.zip();
        assert_eq!(zip.len(), 9);
        assert!(zip.ends_with("11111") && zip.bytes().all(|b| b.is_ascii_digit()));
    }
}

#[test]
fn about_ten_percent_of_data_is_original() {
    let mut rng = TpccRng::new(9);
    let rows = 20_000;
    let original = (0..rows)
        .map(|_| rng.data(26, 50))
        .inspect(|d| assert!((26..=50).contains(&d.len())))
        .filter(|d| d.contains("ORIGINAL"))
        .count();
    assert!((1_700..=2_300).contains(&original), "{original} of {rows}");
}

#[test]
fn permutation_is_a_permutation() {
    let mut rng = TpccRng::new(1);
    let mut p = rng.permutation(3000);
    assert_ne!(p, (1..=3000).collect::<Vec<_>>());
    p.sort_unstable();
    assert_eq!(p, (1..=3000).collect::<Vec<_>>());
    assert!(rng.permutation(-4).is_empty());
}

#[test]
fn run_constant_respects_the_load_constant() {
    for seed in 0..500 {
        let load = NuRandConstants::for_load(seed);
        assert!((0..=255).contains(&load.c_last));
        assert!((0..=1023).contains(&load.c_id));
        assert!((0..=8191).contains(&load.ol_i_id));
        let run = load.for_run(seed);
        let delta = (run.c_last - load.c_last).abs();
        assert!(
            (65..=119).contains(&delta) && delta != 96 && delta != 112,
            "delta {delta}"
        );
        assert_eq!((run.c_id, run.ol_i_id), (load.c_id, load.ol_i_id));
        assert_eq!(NuRandConstants::for_load(seed), load, "deterministic");
    }
}
