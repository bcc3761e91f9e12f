//! HDF5 round trips: bit-exact for f16/f32/f64, meshes with their hierarchy, atomic
//! writes, type checking on read.

use half::f16;
use tensorfem::io::h5;
use tensorfem::mesh::{unit_cube, unit_square, unit_square_refined, Element};

/// Values that stress a format: signed zeros, subnormals, extremes, non-finite values.
fn awkward_f64() -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        f64::MIN_POSITIVE,
        f64::MIN_POSITIVE / 8.0,
        f64::MAX,
        f64::MIN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        std::f64::consts::PI,
    ];
    v.extend((0..1000).map(|i| ((i as f64) * 0.7131).sin() * 10f64.powi(i % 40 - 20)));
    v
}

#[test]
fn vectors_and_dense_matrices_round_trip_bit_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("round.h5");
    let d = awkward_f64();
    let s: Vec<f32> = d
        .iter()
        .map(|&x| x as f32)
        .chain([f32::from_bits(1), -0.0f32])
        .collect();
    let h: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect(); // every f16, NaNs included
    let dense: Vec<f64> = (0..6 * 4).map(|i| i as f64 / 3.0).collect();

    let w = h5::H5Writer::create(&path).unwrap();
    h5::write_provenance(w.root(), Some("[mesh]\nn = 4\n")).unwrap();
    h5::write_vector(w.root(), "d", &d).unwrap();
    h5::write_vector(w.root(), "s", &s).unwrap();
    h5::write_vector(w.root(), "h", &h).unwrap();
    h5::write_dense(w.root(), "m", 6, 4, &dense).unwrap();
    let hd: Vec<f16> = dense.iter().map(|&x| f16::from_f64(x)).collect();
    h5::write_dense(w.root(), "mh", 6, 4, &hd).unwrap();
    w.commit().unwrap();

    let f = h5::open(&path).unwrap();
    let bits64 = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits64(&h5::read_vector::<f64>(&f, "d").unwrap()),
        bits64(&d)
    );
    let s_back = h5::read_vector::<f32>(&f, "s").unwrap();
    assert_eq!(
        s_back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        s.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    let h_back = h5::read_vector::<f16>(&f, "h").unwrap();
    assert_eq!(
        h_back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        h.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    assert_eq!(
        h5::read_dense::<f64>(&f, "m").unwrap(),
        (6, 4, dense.clone())
    );
    assert_eq!(h5::read_dense::<f16>(&f, "mh").unwrap(), (6, 4, hd));

    // Provenance.
    assert_eq!(h5::read_str_attr(&f, "config").unwrap(), "[mesh]\nn = 4\n");
    assert_eq!(
        h5::read_str_attr(&f, "tensorfem_version").unwrap(),
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(
        h5::read_scalar_attr::<u32>(&f, "schema_version").unwrap(),
        h5::SCHEMA_VERSION
    );

    // Reading with the wrong type is an error naming both types, not a silent conversion.
    let err = h5::read_vector::<f16>(&f, "d").unwrap_err().to_string();
    assert!(
        err.contains("dataset d") && err.contains("expected"),
        "{err}"
    );
    assert!(h5::read_vector::<f64>(&f, "missing").is_err());
    assert!(
        h5::read_vector::<f64>(&f, "m").is_err(),
        "a matrix is not a vector"
    );
}

#[test]
fn meshes_round_trip_with_hierarchy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesh.h5");
    let q1 = unit_square_refined(4, 2, Element::Q1).unwrap();
    let p1 = unit_square_refined(2, 3, Element::P1).unwrap();
    let plain = unit_square(5, Element::P1).unwrap();
    let cube = unit_cube(3).unwrap();
    let w = h5::H5Writer::create(&path).unwrap();
    for (name, write) in [("q1", &q1), ("p1", &p1), ("plain", &plain)] {
        let g = w.root().create_group(name).unwrap();
        h5::write_mesh(&g, write).unwrap();
    }
    let g = w.root().create_group("cube").unwrap();
    h5::write_mesh(&g, &cube).unwrap();
    drop(g);
    w.commit().unwrap();

    let f = h5::open(&path).unwrap();
    assert_eq!(h5::read_mesh::<2>(&f.group("q1").unwrap()).unwrap(), q1);
    assert_eq!(h5::read_mesh::<2>(&f.group("p1").unwrap()).unwrap(), p1);
    assert_eq!(
        h5::read_mesh::<2>(&f.group("plain").unwrap()).unwrap(),
        plain
    );
    assert_eq!(h5::read_mesh::<3>(&f.group("cube").unwrap()).unwrap(), cube);
    assert!(
        h5::read_mesh::<3>(&f.group("q1").unwrap()).is_err(),
        "dimension is checked"
    );
}

#[test]
fn writes_are_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join("out.h5");

    // An abandoned write leaves nothing behind, not even the temporary file.
    {
        let w = h5::H5Writer::create(&path).unwrap();
        h5::write_vector(w.root(), "x", &[1.0f64, 2.0]).unwrap();
    }
    assert!(!path.exists());
    assert_eq!(
        std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
        0
    );

    // A previous complete file stays intact until the new one is committed.
    let w = h5::H5Writer::create(&path).unwrap();
    h5::write_vector(w.root(), "x", &[1.0f64]).unwrap();
    w.commit().unwrap();
    let w = h5::H5Writer::create(&path).unwrap();
    h5::write_vector(w.root(), "x", &[2.0f64, 3.0]).unwrap();
    assert_eq!(
        h5::read_vector::<f64>(&h5::open(&path).unwrap(), "x").unwrap(),
        vec![1.0]
    );
    w.commit().unwrap();
    assert_eq!(
        h5::read_vector::<f64>(&h5::open(&path).unwrap(), "x").unwrap(),
        vec![2.0, 3.0]
    );
    assert_eq!(
        std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
        1
    );

    assert!(h5::open(&dir.path().join("absent.h5")).is_err());

    // A destination that cannot be replaced (a directory) fails the commit and leaves
    // neither a temporary file nor a change behind.
    let blocked = dir.path().join("blocked");
    std::fs::create_dir_all(blocked.join("x.h5")).unwrap();
    std::fs::write(blocked.join("x.h5").join("keep"), "kept").unwrap();
    let w = h5::H5Writer::create(&blocked.join("x.h5")).unwrap();
    h5::write_vector(w.root(), "x", &[1.0f64]).unwrap();
    assert!(w.commit().is_err());
    let left: Vec<_> = std::fs::read_dir(&blocked)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("x.h5")],
        "only the directory remains"
    );
    assert_eq!(
        std::fs::read_to_string(blocked.join("x.h5").join("keep")).unwrap(),
        "kept"
    );
}
