"""Session fixtures over tests/user_project.py, loaded with ``pytest_plugins = ["user_project_fixtures"]``
so that the user's models are trained once per session, not once per test module."""

from __future__ import annotations

import pytest

from user_project import UserModels, train_smallnet, write_netdef, write_photos


@pytest.fixture(scope="session")
def user_models(tmp_path_factory: pytest.TempPathFactory) -> UserModels:
    folder = tmp_path_factory.mktemp("user-models")
    write_netdef(folder)
    v1 = train_smallnet(folder, folder / "v1.pth", epochs=2, seed=0)
    v2 = train_smallnet(folder, folder / "v2.pth", epochs=2, seed=1, start_from=v1)
    names = write_photos(folder / "photos")
    return UserModels(folder, v1, v2, folder / "photos", tuple(names))
